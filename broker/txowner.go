package broker

import (
	"strings"
	"sync"
	"time"

	"github.com/metaqgo/metaq/broker/tx"
	"github.com/metaqgo/metaq/protocol"
)

// Owners of XA transactions under [security] (docs/security.md). The
// transaction table keeps XA transactions broker-wide, by xid: without
// this, any user could put into, prepare, commit or roll back another
// user's XA transaction by naming its xid. The broker remembers which user
// began each one (BEGIN), and only that user — on any connection: a
// transaction manager that reconnects keeps working — or an admin may use
// it. A prepared transaction the table rebuilt from the log after a
// restart (or a promotion) has no owner here: only an admin ends it
// (RECOVER, with which a transaction manager finds it then, is for admins
// already).

type xaOwner struct {
	user  string
	begun time.Time
}

type xaOwners struct {
	mu      sync.Mutex
	m       map[string]xaOwner
	pruneAt int
}

// xaPruneMin is the size of the owner table below which it is not pruned.
const xaPruneMin = 1024

// xaDenied checks an XA transaction command (typ; "" for a put with the
// xid as its txKey) of the connection's user. It returns the 403 body, ""
// when allowed.
func (c *conn) xaDenied(key []byte, typ string) string {
	s := c.srv
	a := s.opts.Auth
	if a == nil || !strings.HasPrefix(string(key), "XID:") || typ == "END" || typ == "FORGET" || typ == "RECOVER" {
		return ""
	}
	s.xa.mu.Lock()
	o, ok := s.xa.m[string(key)]
	s.xa.mu.Unlock()
	switch {
	case ok && o.user == c.user:
		return ""
	case a.Unrestricted(c.user):
		return ""
	case !ok && typ == "":
		return "" // a put into an unknown transaction: the table refuses it
	case !ok && typ == "BEGIN" && !s.preparedXA(key):
		return "" // a new transaction (BEGIN of a prepared one would make its caller the owner)
	}
	reason := "XA transaction " + string(key) + " was begun by another user"
	if !ok {
		reason = "XA transaction " + string(key) + " was prepared before this broker started: only an admin can end it"
	}
	c.log.Info("request denied", "op", protocol.OpTransaction.String(), "user", c.user, "reason", reason)
	return "forbidden: " + reason
}

// preparedXA reports whether the table holds key as a prepared XA
// transaction (one with no owner here: rebuilt from the log).
func (s *Server) preparedXA(key []byte) bool {
	_, uq, err := tx.ParseKey(key)
	if err != nil {
		return false
	}
	for _, k := range s.tx.Prepared(uq) {
		if k == string(key) {
			return true
		}
	}
	return false
}

// xaBegun records the connection's user as the owner of a begun XA
// transaction (the first BEGIN wins); xaEnded forgets a finished one.
func (c *conn) xaBegun(key string) {
	s := c.srv
	if s.opts.Auth == nil || !strings.HasPrefix(key, "XID:") {
		return
	}
	now := time.Now()
	x := &s.xa
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.m == nil {
		x.m = map[string]xaOwner{}
	}
	if _, ok := x.m[key]; !ok {
		x.m[key] = xaOwner{user: c.user, begun: now}
	}
	if len(x.m) < max(x.pruneAt, xaPruneMin) {
		return
	}
	// Transactions that time out or end without a reply to this broker's
	// connections leave their owners: forget those older than the longest
	// transaction life that are not prepared.
	prepared := map[string]bool{}
	for _, k := range s.tx.Prepared("") {
		prepared[k] = true
	}
	life := s.opts.Tx.MaxTimeout
	if life <= 0 {
		life = time.Minute
	}
	for k, o := range x.m {
		if !prepared[k] && now.Sub(o.begun) > life {
			delete(x.m, k)
		}
	}
	x.pruneAt = 2 * len(x.m)
}

func (c *conn) xaEnded(key string) {
	if c.srv.opts.Auth == nil {
		return
	}
	x := &c.srv.xa
	x.mu.Lock()
	delete(x.m, key)
	x.mu.Unlock()
}
