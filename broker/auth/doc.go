// Package auth is the one place where the broker decides who a client is
// and what it may do (docs/security.md): users with hashed secrets (a
// watched users file or ZooKeeper's <zkRoot>/config/users), per-user
// allow/deny patterns for publish, subscribe and consumer groups, admin
// rights, the anonymous policy, the per-address throttle of failed
// attempts, HTTP request signatures and bearer tokens, dashboard sessions,
// and the TLS configurations of the listeners and of the broker's own
// client links.
//
// With no [security] section nothing here runs: the broker's handlers skip
// the check when their Authorizer is nil.
//
// Lock rules: an Authorizer's user table is an immutable *Users swapped
// atomically on reload, so Check takes no lock and allocates nothing on the
// allowed path. FailLimiter.mu, replayCache.mu and sessions.mu each guard
// only their own map and are never held across I/O or a bcrypt comparison.
package auth
