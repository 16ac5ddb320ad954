// Package tx is the broker's transaction table: MetaQ's local and XA
// transactions (the `transaction` command and puts with a txKey) and
// transactional messages with check-back (half messages, `txend`, the
// broker's `check` requests). Everything that must survive a crash is a
// record of the system topics %TX_HALF% and %TX_OP% in the commit log, and
// Open rebuilds the table from them (docs/transactions.md).
//
// Lock rules: Manager.mu guards every map and every Tx/half entry's mutable
// fields; functions ending in Locked need it held. It is never held across a
// store call (appends may wait for a segment roll), nor across a producer's
// SendCheck. A Tx being appended (busy) belongs to the command appending
// it: others get XAER_PROTO.
package tx

import (
	"bytes"
	"errors"
	"strconv"
)

// Kind tells local from XA transaction keys.
type Kind uint8

const (
	KindNull  Kind = iota // `null` (the key of RECOVER)
	KindLocal             // TX:<sessionId>:<n>
	KindXA                // XID:<formatId>:<gtrid hex>:<bqual hex>:<uniqueQualifier>
)

// ParseKey validates a transaction key the way MetaQ's TransactionId.valueOf
// does and returns its kind; for XA keys also the unique qualifier.
func ParseKey(key []byte) (Kind, string, error) {
	switch {
	case string(key) == "null":
		return KindNull, "", nil
	case bytes.HasPrefix(key, []byte("TX:")):
		parts := bytes.Split(key, []byte(":"))
		if len(parts) != 3 || len(parts[1]) == 0 {
			return 0, "", errors.New("invalid local transaction id " + strconv.Quote(string(key)) + ": want TX:<sessionId>:<n>")
		}
		if _, err := strconv.ParseInt(string(parts[2]), 10, 32); err != nil {
			return 0, "", errors.New("invalid local transaction id " + strconv.Quote(string(key)) + ": <n> is not an int")
		}
		return KindLocal, "", nil
	case bytes.HasPrefix(key, []byte("XID:")):
		parts := bytes.Split(key, []byte(":"))
		if len(parts) != 5 {
			return 0, "", errors.New("invalid XA transaction id " + strconv.Quote(string(key)) + ": want XID:<formatId>:<gtrid>:<bqual>:<uq>")
		}
		if _, err := strconv.ParseInt(string(parts[1]), 10, 32); err != nil {
			return 0, "", errors.New("invalid XA transaction id " + strconv.Quote(string(key)) + ": formatId is not an int")
		}
		for _, h := range parts[2:4] {
			if len(h)%2 != 0 || !isHex(h) {
				return 0, "", errors.New("invalid XA transaction id " + strconv.Quote(string(key)) + ": gtrid and bqual are lowercase hex")
			}
		}
		return KindXA, string(parts[4]), nil
	}
	return 0, "", errors.New("invalid transaction id " + strconv.Quote(string(key)) + ": want TX:…, XID:… or null")
}

// printableKey reports whether key is printable ASCII, without spaces
// (0x21-0x7e): what BEGIN accepts as a new transaction key. The wire parser
// splits a line on ' ' and refuses control bytes, but passes any other byte;
// a key must also survive the text of its %TX_OP% records and be typed back
// by an operator (metaq tx commit <xid>).
func printableKey(key string) bool {
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

func isHex(b []byte) bool {
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// XA error codes (javax.transaction.xa.XAException), as MetaQ sends them in
// `XAException:code=<n>,msg=<text>` reply bodies.
const (
	XAErrNotA   = -4 // XAER_NOTA: unknown transaction
	XAErrInval  = -5 // XAER_INVAL
	XAErrProto  = -6 // XAER_PROTO: bad state transition
	XAErrRMErr  = -3 // XAER_RMERR: resource manager error
	XARBOther   = 104
	XAOK        = 0 // PREPARE vote: work to commit
	XARDOnly    = 3 // PREPARE vote: nothing was done, the transaction is finished
	XAHeurCom   = 7
	XAHeurRB    = 6
	XAHeurMixed = 5
)

// XAError is an XA failure; its reply body is MetaQ's.
type XAError struct {
	Code int
	Msg  string
}

func (e *XAError) Error() string {
	return "XAException:code=" + strconv.Itoa(e.Code) + ",msg=" + e.Msg
}

func xaErr(code int, msg string) *XAError { return &XAError{Code: code, Msg: msg} }
