package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Op is what a request wants to do.
type Op uint8

// Operations checked by Check.
const (
	OpConnect   Op = iota // stats, transactions, anything read-only about the broker
	OpPublish             // put to a topic
	OpSubscribe           // get/offset/seek/query on a topic (as a group, when there is one)
	OpGroup               // act as a consumer group (retry, producer, commit)
	OpAdmin               // admin commands, system topics, replication
	numOps
)

var opNames = [numOps]string{"connect", "publish", "subscribe", "group", "admin"}

func (o Op) String() string {
	if o < numOps {
		return opNames[o]
	}
	return "unknown"
}

// Ops lists every Op (metrics labels).
func Ops() []Op { return []Op{OpConnect, OpPublish, OpSubscribe, OpGroup, OpAdmin} }

// Options configure an Authorizer.
type Options struct {
	// Anonymous: "all" (default), "none" or a user name (docs/security.md).
	Anonymous string
	// FailRate, FailBurst, MaxDelay: the per-address throttle of failed
	// attempts (FailLimiter).
	FailRate  float64
	FailBurst int
	MaxDelay  time.Duration
	Logger    *slog.Logger // rate-limited by the caller (internal/logx)
}

// Authorizer decides. Its methods are safe for concurrent use.
type Authorizer struct {
	users     atomic.Pointer[Users]
	anonymous string
	limiter   *FailLimiter
	log       *slog.Logger

	denied    [numOps]atomic.Int64
	failures  atomic.Int64 // wrong user or secret (checked)
	throttled atomic.Int64 // attempts slowed down or refused unchecked
	refused   atomic.Int64 // attempts refused unchecked
	checks    atomic.Int64 // bcrypt comparisons run
}

// New returns an Authorizer with no users (SetUsers adds them).
func New(o Options) *Authorizer {
	if o.Anonymous == "" {
		o.Anonymous = "all"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	a := &Authorizer{anonymous: o.Anonymous, limiter: NewFailLimiter(o.FailRate, o.FailBurst, o.MaxDelay), log: o.Logger}
	a.users.Store(&Users{byName: map[string]*User{}, byToken: map[[sha256.Size]byte]*User{}})
	return a
}

// SetUsers replaces the user table (a reload). Connections keep their
// identity by name: a removed user's connections are refused from their
// next request on, changed rights apply at once.
func (a *Authorizer) SetUsers(u *Users) { a.users.Store(u) }

// Users is the current user table.
func (a *Authorizer) Users() *Users { return a.users.Load() }

// Anonymous is the anonymous policy.
func (a *Authorizer) Anonymous() string { return a.anonymous }

// AnonymousAll reports whether an unauthenticated client may do everything.
func (a *Authorizer) AnonymousAll() bool { return a.anonymous == "all" }

// Limiter is the failed-attempt throttle.
func (a *Authorizer) Limiter() *FailLimiter { return a.limiter }

// Reasons (constant strings: a denial allocates nothing either).
const (
	reasonAuthFirst   = "authenticate first: auth <user> <secret> <opaque>"
	reasonGone        = "user no longer exists"
	reasonAdmin       = "admin rights required"
	reasonSystem      = "system topics are for the broker and admins"
	reasonPublish     = "not allowed to publish to this topic"
	reasonSubscribe   = "not allowed to subscribe to this topic"
	reasonGroup       = "not allowed to use this consumer group"
	reasonBadLogin    = "authentication failed"
	reasonThrottled   = "too many failed authentication attempts from this address; retry later"
	reasonNoAnonymous = "anonymous access is not allowed"
)

// Check decides whether user ("" = not authenticated) may do op on topic
// (as group). It returns "" when allowed, else the reason for the 403, and
// counts the denial.
func (a *Authorizer) Check(user string, op Op, topic, group []byte) string {
	var u *User
	if user == "" {
		switch a.anonymous {
		case "all":
			return ""
		case "none":
			return a.deny(op, reasonAuthFirst)
		}
		if u = a.users.Load().byName[a.anonymous]; u == nil {
			return a.deny(op, reasonNoAnonymous)
		}
	} else if u = a.users.Load().byName[user]; u == nil {
		return a.deny(op, reasonGone)
	}
	if r := u.Perms.check(op, topic, group); r != "" {
		return a.deny(op, r)
	}
	return ""
}

// Unrestricted reports whether user ("" = not authenticated) may do
// everything — an admin, or anonymous=all — without counting a denial: a
// caller skips the work a finer check needs (reading a record from the log).
func (a *Authorizer) Unrestricted(user string) bool {
	if user == "" {
		switch a.anonymous {
		case "all":
			return true
		case "none":
			return false
		}
		user = a.anonymous
	}
	u := a.users.Load().byName[user]
	return u != nil && u.Admin
}

// MayPublish reports whether user ("" = not authenticated) may put to some
// topic (an admin, or a user with publish patterns), without counting a
// denial: the broker decides from it, on a put's header line, whether to
// buffer put data that cannot be accepted whatever its topic.
func (a *Authorizer) MayPublish(user string) bool {
	if user == "" {
		switch a.anonymous {
		case "all":
			return true
		case "none":
			return false
		}
		user = a.anonymous
	}
	u := a.users.Load().byName[user]
	return u != nil && (u.Admin || len(u.Publish) > 0)
}

// MayUseGroups reports whether user ("" = not authenticated) may use some
// consumer group (an admin, or a user with group patterns), without counting
// a denial: the broker decides from it, on an ack's (reject's, release's,
// extend's) header line, whether to buffer a block of handles that cannot be
// accepted whatever its group.
func (a *Authorizer) MayUseGroups(user string) bool {
	if user == "" {
		switch a.anonymous {
		case "all":
			return true
		case "none":
			return false
		}
		user = a.anonymous
	}
	u := a.users.Load().byName[user]
	return u != nil && (u.Admin || len(u.Groups) > 0)
}

// IsAdmin reports whether user (or the anonymous policy) has admin rights.
func (a *Authorizer) IsAdmin(user string) bool { return a.Check(user, OpAdmin, nil, nil) == "" }

func (a *Authorizer) deny(op Op, reason string) string {
	if op < numOps {
		a.denied[op].Add(1)
	}
	return reason
}

func (p *Perms) check(op Op, topic, group []byte) string {
	if p.Admin {
		return ""
	}
	switch op {
	case OpConnect:
		return ""
	case OpAdmin:
		return reasonAdmin
	case OpGroup:
		return p.checkGroup(group)
	}
	if len(topic) > 0 && topic[0] == '%' {
		return p.checkSystem(op, topic, group)
	}
	switch op {
	case OpPublish:
		if p.DenyPublish.match(topic) || !p.Publish.match(topic) {
			return reasonPublish
		}
		return ""
	case OpSubscribe:
		if p.DenySubscribe.match(topic) || !p.Subscribe.match(topic) {
			return reasonSubscribe
		}
		if len(group) > 0 {
			return p.checkGroup(group)
		}
		return ""
	}
	return reasonAdmin
}

func (p *Perms) checkGroup(group []byte) string {
	if p.DenyGroups.match(group) || !p.Groups.match(group) {
		return reasonGroup
	}
	return ""
}

// checkSystem: system topics are the broker's and the admins', except
// %RETRY%<group> and %DLQ%<group>, which a consumer of the group may read,
// and %TRACE%, to which anyone who may publish somewhere may write trace
// records (docs/trace.md).
func (p *Perms) checkSystem(op Op, topic, group []byte) string {
	if op == OpSubscribe {
		for _, pre := range [...]string{"%RETRY%", "%DLQ%"} {
			if len(topic) > len(pre) && string(topic[:len(pre)]) == pre {
				g := topic[len(pre):]
				if len(group) > 0 && string(group) != string(g) {
					return reasonSystem
				}
				return p.checkGroup(g)
			}
		}
	}
	if op == OpPublish && string(topic) == "%TRACE%" && len(p.Publish) > 0 {
		return ""
	}
	return reasonSystem
}

// Authenticate checks user's secret for a client at host. Failures are
// throttled per host (FailLimiter): the attempt may wait (up to the
// configured maximum; stop aborts the wait) or be refused unchecked. It
// returns "" on success, else the reason.
func (a *Authorizer) Authenticate(host, user string, secret []byte, stop <-chan struct{}) string {
	wait, ok := a.limiter.Admit(host)
	if !ok {
		a.throttled.Add(1)
		a.refused.Add(1)
		a.log.Warn("authentication refused: too many failed attempts from this address", "remote", host, "user", user)
		return reasonThrottled
	}
	if wait > 0 {
		a.throttled.Add(1)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
			return reasonThrottled
		}
	}
	a.checks.Add(1)
	us := a.users.Load()
	u := us.byName[user]
	if u == nil || u.hash == nil {
		_ = bcrypt.CompareHashAndPassword(us.dummy(), secret) // as long as a wrong secret
	} else if u.checkSecret(secret) {
		a.limiter.Succeeded(host)
		return ""
	}
	a.failures.Add(1)
	a.log.Warn("authentication failed", "remote", host, "user", user)
	return reasonBadLogin
}

// Token returns the user a bearer token belongs to ("" = none).
func (a *Authorizer) Token(token string) string {
	sum := sha256.Sum256([]byte(token))
	if u := a.users.Load().byToken[sum]; u != nil {
		for _, t := range u.tokens {
			if subtle.ConstantTimeCompare(t, sum[:]) == 1 {
				return u.Name
			}
		}
	}
	return ""
}

// Stats are the Authorizer's counters (metrics).
type Stats struct {
	Denied    map[Op]int64
	Failures  int64 // wrong user or secret
	Throttled int64 // attempts slowed down or refused unchecked
	Refused   int64 // attempts refused unchecked
	Checks    int64 // secrets compared (bcrypt runs, at most)
}

// Stats returns the counters.
func (a *Authorizer) Stats() Stats {
	s := Stats{Denied: map[Op]int64{}, Failures: a.failures.Load(), Throttled: a.throttled.Load(),
		Refused: a.refused.Load(), Checks: a.checks.Load()}
	for _, op := range Ops() {
		s.Denied[op] = a.denied[op].Load()
	}
	return s
}

// CountFailure counts a failed credential that is not a secret (a bad
// token or signature) for host, in the same throttle as secrets. It reports
// false when the host is throttled.
func (a *Authorizer) CountFailure(host string) bool {
	_, ok := a.limiter.Admit(host)
	a.failures.Add(1)
	if !ok {
		a.throttled.Add(1)
	}
	return ok
}
