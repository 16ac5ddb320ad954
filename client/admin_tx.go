package client

import (
	"context"
	"strings"

	"github.com/metaqgo/metaq/protocol"
)

// Transactions from the admin side (heuristic completion, `metaq tx`):
// docs/transactions.md.

// adminSession is the session id the admin's transaction commands carry.
const adminSession = "metaq-admin"

// PreparedXA lists the prepared XA transactions on the broker at addr with
// unique qualifier uq ("" = all of them): MetaQ's RECOVER.
func (a *Admin) PreparedXA(ctx context.Context, addr, uq string) ([]string, error) {
	body, err := a.transaction(ctx, addr, "null", "RECOVER", uq)
	if err != nil || body == "" {
		return nil, err
	}
	return strings.Split(body, "\r\n"), nil
}

// CompleteXA commits (COMMIT_TWO_PHASE) or rolls back a prepared XA
// transaction on the broker at addr, from any connection. A broker refusal
// is a *BrokerError whose Message is MetaQ's `XAException:code=…,msg=…`.
func (a *Admin) CompleteXA(ctx context.Context, addr, xid string, commit bool) error {
	typ := "ROLLBACK"
	if commit {
		typ = "COMMIT_TWO_PHASE"
	}
	_, err := a.transaction(ctx, addr, xid, typ, "")
	return err
}

// EndHalf finishes a pending half message (txend commit|rollback).
func (a *Admin) EndHalf(ctx context.Context, addr string, msgID int64, commit bool) error {
	c, err := a.conn(addr)
	if err != nil {
		return err
	}
	action := "rollback"
	if commit {
		action = "commit"
	}
	cl, err := c.do(ctx, kindOther, a.cfg.RequestTimeout, func(dst []byte, op int32) []byte {
		return protocol.AppendTxEnd(dst, msgID, action, op)
	})
	if err != nil {
		return err
	}
	defer putCall(cl)
	if cl.code != protocol.StatusSuccess {
		return brokerErr(addr, cl.code, cl.body)
	}
	return nil
}

func (a *Admin) transaction(ctx context.Context, addr, key, typ, uq string) (string, error) {
	c, err := a.conn(addr)
	if err != nil {
		return "", err
	}
	cl, err := c.do(ctx, kindOther, a.cfg.RequestTimeout, func(dst []byte, op int32) []byte {
		return protocol.AppendTransaction(dst, key, adminSession, typ, 0, uq, op)
	})
	if err != nil {
		return "", err
	}
	defer putCall(cl)
	if cl.code != protocol.StatusSuccess {
		return "", brokerErr(addr, cl.code, cl.body)
	}
	return string(cl.body), nil
}
