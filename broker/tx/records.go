package tx

import (
	"bytes"
	"errors"
	"strconv"

	"github.com/metaqgo/metaq/protocol"
)

// System topics (partition 0 of each). Both are plain topics of the commit
// log: readable with `get`, replicated like everything else, cut by
// retention like everything else.
const (
	// HalfTopic holds messages that are not visible yet: the half messages
	// of check-back transactions, and the messages of prepared XA
	// transactions. Record format: flag, data and the user's properties are
	// the message's own; the properties are prefixed by three pairs
	//
	//	rt=<real topic>&rp=<real partition>&xid=<XA key>   (prepared XA)
	//	rt=<real topic>&rp=<real partition>&pg=<group>      (half message)
	//
	// followed by `&` and the message's own properties when it has any.
	HalfTopic = "%TX_HALF%"
	// OpTopic holds outcomes, one text line per record:
	//
	//	prepare <xid> <halfFrom> <n> [owner=<user>]
	//	                              XA prepared: its messages are %TX_HALF%/0 [halfFrom, halfFrom+n);
	//	                              owner= names the user who began it (docs/security.md), %XX-escaped
	//	                              as a property value (protocol.AppendEscaped: only [A-Za-z0-9._~-]
	//	                              and %XX, so never a space). Absent when it was begun by no user
	//	                              (security off), and in the records of older brokers: the owner is
	//	                              then unknown, and under [security] only an admin may end it.
	//	commit <xid> <halfFrom> <n> <from> <runBytes> <lastBytes>
	//	                              XA committed: appended right BEFORE the run of its messages
	//	                              [from, n) of %TX_HALF%/0 [halfFrom, halfFrom+n), in the same
	//	                              contiguous append; the run takes runBytes of log after this
	//	                              record, its last record lastBytes. Recovery checks the run's
	//	                              last record and completes a run a power loss cut (commit.go).
	//	commit <xid>                  (older brokers) XA committed, appended right after its messages
	//	rollback <xid>                prepared XA rolled back
	//	hend <runBytes> <lastBytes> +<msgId> -<msgId> …
	//	                              half messages committed (+) and rolled back (-), appended right
	//	                              BEFORE the run of the committed ones' real messages, in order: the
	//	                              run takes runBytes of log after this record, its last record
	//	                              lastBytes; recovery completes a run a crash cut (end.go)
	//	hcommit <msgId>               (older brokers) half message committed (right after the real message)
	//	hrollback <msgId>             (older brokers) half message rolled back
	//	hcheck <msgId>                the broker checked the half message once more
	OpTopic = "%TX_OP%"
)

// halfProps renders the properties of a %TX_HALF% record.
func halfProps(dst []byte, topic string, partition int32, tagKey, tagVal string, own []byte) []byte {
	dst = append(dst, "rt="...)
	dst = protocol.AppendEscaped(dst, topic)
	dst = append(dst, "&rp="...)
	dst = strconv.AppendInt(dst, int64(partition), 10)
	dst = append(dst, '&')
	dst = append(dst, tagKey...)
	dst = append(dst, '=')
	dst = protocol.AppendEscaped(dst, tagVal)
	if len(own) > 0 {
		dst = append(dst, '&')
		dst = append(dst, own...)
	}
	return dst
}

// halfMeta is what the prefix of a %TX_HALF% record's properties says.
type halfMeta struct {
	topic     string
	partition int32
	xid       string // prepared XA message
	group     string // half message
	own       []byte // the message's own properties (aliases the record)
}

var errBadHalf = errors.New("tx: malformed " + HalfTopic + " record properties")

func parseHalfProps(props []byte) (halfMeta, error) {
	r, err := parseHalfRaw(props)
	if err != nil {
		return halfMeta{}, err
	}
	h := halfMeta{topic: protocol.Unescape(r.topic), partition: r.partition, own: r.own}
	if r.xid != nil {
		h.xid = protocol.Unescape(r.xid)
	}
	if r.group != nil {
		h.group = protocol.Unescape(r.group)
	}
	return h, nil
}

// halfRaw is halfMeta with the names still raw (aliasing the record).
type halfRaw struct {
	topic, xid, group []byte
	partition         int32
	own               []byte
}

func parseHalfRaw(props []byte) (halfRaw, error) {
	var h halfRaw
	rest := props
	for k := 0; k < 3; k++ {
		var pair []byte
		if i := bytes.IndexByte(rest, '&'); i >= 0 {
			pair, rest = rest[:i], rest[i+1:]
		} else {
			pair, rest = rest, nil
			if k < 2 {
				return h, errBadHalf
			}
		}
		key, val, ok := bytes.Cut(pair, []byte("="))
		if !ok {
			return h, errBadHalf
		}
		switch {
		case k == 0 && string(key) == "rt":
			h.topic = val
		case k == 1 && string(key) == "rp":
			p, ok := parseUint31(val)
			if !ok {
				return h, errBadHalf
			}
			h.partition = p
		case k == 2 && string(key) == "xid":
			h.xid = val
		case k == 2 && string(key) == "pg":
			h.group = val
		default:
			return h, errBadHalf
		}
	}
	if len(h.topic) == 0 {
		return h, errBadHalf
	}
	h.own = rest
	return h, nil
}

// parseUint31 parses a non-negative decimal int32 (no allocation).
func parseUint31(b []byte) (int32, bool) {
	if len(b) == 0 || len(b) > 10 {
		return 0, false
	}
	var v int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	if v > 1<<31-1 {
		return 0, false
	}
	return int32(v), true
}

// op is one decoded %TX_OP% record.
type op struct {
	verb     string
	key      string // xid, or the half message's id in decimal
	halfFrom int64
	n        int
	// commit (new form): the run that follows the op
	from                int
	runBytes, lastBytes int64
	runKnown            bool
	// prepare: owner= (ownerKnown: the field is there)
	owner      string
	ownerKnown bool
	// hend: the half messages it finishes, in order (end.go)
	ends []endID
}

func appendOp(dst []byte, verb, key string, halfFrom int64, n int) []byte {
	dst = append(dst, verb...)
	dst = append(dst, ' ')
	dst = append(dst, key...)
	if verb == "prepare" {
		dst = append(dst, ' ')
		dst = strconv.AppendInt(dst, halfFrom, 10)
		dst = append(dst, ' ')
		dst = strconv.AppendInt(dst, int64(n), 10)
	}
	return dst
}

// appendPrepareOp renders the prepare op of an XA transaction begun by
// owner ("": none, no owner= field).
func appendPrepareOp(dst []byte, key string, halfFrom int64, n int, owner string) []byte {
	dst = appendOp(dst, "prepare", key, halfFrom, n)
	if owner != "" {
		dst = append(dst, " owner="...)
		dst = protocol.AppendEscaped(dst, owner)
	}
	return dst
}

// escapedValue reports whether v is what protocol.AppendEscaped renders: a
// non-empty run of unreserved bytes and %XX escapes (no '+', no bare '%').
func escapedValue(v []byte) bool {
	if len(v) == 0 {
		return false
	}
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~':
		case c == '%' && i+2 < len(v) && upperHex(v[i+1]) && upperHex(v[i+2]):
			i += 2
		default:
			return false
		}
	}
	return true
}

func upperHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'A' && c <= 'F' }

// appendCommitOp renders the commit op that precedes the run of messages
// [o.from, o.n) of a prepared transaction.
func appendCommitOp(dst []byte, o *op) []byte {
	dst = appendOp(dst, "commit", o.key, 0, 0)
	for _, v := range []int64{o.halfFrom, int64(o.n), int64(o.from), o.runBytes, o.lastBytes} {
		dst = append(dst, ' ')
		dst = strconv.AppendInt(dst, v, 10)
	}
	return dst
}

// parseOp decodes a %TX_OP% record. Its fields are separated by ASCII
// spaces only: an XA key may hold any other byte an older broker accepted
// (bytes.Fields would also split on U+00A0, U+0085, U+2000…, and the op of
// such a key would be lost at recovery).
func parseOp(data []byte) (op, error) {
	f := splitSpaces(data)
	bad := errors.New("tx: malformed " + OpTopic + " record " + strconv.Quote(string(data[:min(len(data), 128)])))
	if len(f) < 2 {
		return op{}, bad
	}
	o := op{verb: string(f[0]), key: string(f[1])}
	switch o.verb {
	case "prepare":
		if len(f) != 4 && len(f) != 5 { // the owner= field is optional (older brokers)
			return op{}, bad
		}
		from, err1 := strconv.ParseInt(string(f[2]), 10, 64)
		n, err2 := strconv.Atoi(string(f[3]))
		if err1 != nil || err2 != nil || from < 0 || n <= 0 {
			return op{}, bad
		}
		o.halfFrom, o.n = from, n
		if len(f) == 5 {
			v, ok := bytes.CutPrefix(f[4], []byte("owner="))
			if !ok || !escapedValue(v) {
				return op{}, bad
			}
			o.owner, o.ownerKnown = protocol.Unescape(v), true
		}
	case "commit":
		if len(f) == 2 {
			break
		}
		if len(f) != 7 {
			return op{}, bad
		}
		var v [5]int64
		for i := range v {
			x, err := strconv.ParseInt(string(f[2+i]), 10, 64)
			if err != nil || x < 0 {
				return op{}, bad
			}
			v[i] = x
		}
		o.halfFrom, o.n, o.from, o.runBytes, o.lastBytes, o.runKnown = v[0], int(v[1]), int(v[2]), v[3], v[4], true
		if o.n <= 0 || o.from >= o.n || o.lastBytes <= 0 || o.lastBytes > o.runBytes {
			return op{}, bad
		}
	case "hend":
		if !parseEndOp(f, &o) {
			return op{}, bad
		}
	case "rollback", "hcommit", "hrollback", "hcheck":
		if len(f) != 2 {
			return op{}, bad
		}
	default:
		return op{}, bad
	}
	return o, nil
}

// splitSpaces splits b on runs of ' ' (no other byte separates).
func splitSpaces(b []byte) [][]byte {
	var f [][]byte
	for len(b) > 0 {
		if b[0] == ' ' {
			b = b[1:]
			continue
		}
		i := bytes.IndexByte(b, ' ')
		if i < 0 {
			i = len(b)
		}
		f = append(f, b[:i:i])
		b = b[i:]
	}
	return f
}

// withoutProp returns props without the pairs whose key is key (a copy).
func withoutProp(props []byte, key string) []byte {
	out := appendPropsWithout(make([]byte, 0, len(props)+1), props, key)
	if len(out) > 0 {
		out = out[1:] // the '&' before the first pair
	}
	return out
}
