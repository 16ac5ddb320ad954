package broker

import (
	"bytes"

	"github.com/metaqgo/metaq/protocol"
)

// Owners of XA transactions under [security] (docs/security.md). The
// transaction table keeps XA transactions broker-wide, by xid: without
// this, any user could put into, prepare, commit or roll back another
// user's XA transaction by naming its xid. The table records the user who
// began each one (BEGIN, tx.Manager.CommandAs), in the commit log with its
// prepare op, so a prepared transaction keeps its owner across a restart
// or a promotion; only that user — on any connection: a transaction
// manager that reconnects keeps working — or an admin may use it. A
// prepared transaction whose records name no owner (prepared by an older
// broker, or with security off) is admin only (RECOVER, with which a
// transaction manager finds it then, is for admins already).

var xidPrefix = []byte("XID:")

// xaUser is the user a transaction command of the connection is recorded
// for: "" when security is off.
func (c *conn) xaUser() string {
	if c.srv.opts.Auth == nil {
		return ""
	}
	return c.user
}

// xaDenied checks an XA transaction command (typ; "" for a put with the
// xid as its txKey) of the connection's user. It returns the 403 body, ""
// when allowed.
func (c *conn) xaDenied(key []byte, typ string) string {
	a := c.srv.opts.Auth
	if a == nil || !bytes.HasPrefix(key, xidPrefix) || typ == "END" || typ == "FORGET" || typ == "RECOVER" {
		return ""
	}
	owner, known, held := c.srv.tx.XAOwner(key)
	switch {
	case known && owner == c.user:
		return ""
	case a.Unrestricted(c.user):
		return ""
	case !held && typ == "":
		return "" // a put into an unknown transaction: the table refuses it
	case !held && typ == "BEGIN":
		return "" // a new transaction (a BEGIN of a held one, prepared or not, would not make its caller the owner)
	}
	var reason string
	switch {
	case known:
		reason = "XA transaction " + string(key) + " was begun by another user"
	case held:
		reason = "XA transaction " + string(key) + " was prepared with no recorded owner (by an older broker, or with security off): only an admin can end it"
	default:
		reason = "XA transaction " + string(key) + " is not open on this broker: only an admin can end it"
	}
	c.log.Info("request denied", "op", protocol.OpTransaction.String(), "user", c.user, "reason", reason)
	return "forbidden: " + reason
}
