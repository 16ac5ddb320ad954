package client

import (
	"fmt"
	"strings"

	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/protocol/filter"
)

// sqlMarker starts the string SQL returns. Control characters are refused
// in tag expressions, so it cannot be mistaken for one.
const sqlMarker = "\x00SQL92\x00"

// maxWhereEscaped bounds an expression as sent (URL-escaped) so that the
// get line carrying it stays under the protocol's 4096-byte line limit.
const maxWhereEscaped = protocol.MaxLineLen - 1024

// SQL returns a subscription expression for Subscribe that selects messages
// by an expression over their properties, in RocketMQ's SQL92 subset:
//
//	c.Subscribe("orders", client.SQL("TAGS IN ('paid','refunded') AND amount > 100"), h)
//
// Names are properties of the message (tag or TAGS, keys or KEYS, any user
// property) and bornTime, reconsumeTimes. Subscribe compiles it and refuses
// a syntax error (a *filter.SyntaxError with its position); the broker
// evaluates it in every get and the consumer checks delivered messages
// again. docs/protocol.md ("Expression filters") has the language.
func SQL(expr string) string { return sqlMarker + expr }

// compileWhere returns the compiled expression of a SQL subscription
// expression (nil for a tag expression).
func compileWhere(sub string) (*filter.Expr, error) {
	src, ok := strings.CutPrefix(sub, sqlMarker)
	if !ok {
		return nil, nil
	}
	e, err := filter.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("metaq client: filter expression %q: %w", src, err)
	}
	if n := escapedLen(src); n > maxWhereEscaped {
		return nil, fmt.Errorf("metaq client: filter expression too long: %d bytes escaped, at most %d fit in a get", n, maxWhereEscaped)
	}
	return e, nil
}

// whereMatcher checks fetched messages against a get's expression again:
// a broker that does not evaluate it (MetaQ's) delivers everything. The
// decoder keeps the last one, so a consumer compiles its expression once.
type whereMatcher struct {
	expr  *filter.Expr
	props []byte
}

// whereMatcher returns the matcher for a get's where field (nil for "").
func (d *decoder) whereMatcher(where string) (*whereMatcher, error) {
	if where == "" {
		return nil, nil
	}
	if d.where != nil && d.where.expr.String() == where {
		return d.where, nil
	}
	e, err := compileWhere(sqlMarker + where)
	if err != nil {
		return nil, err
	}
	d.where = &whereMatcher{expr: e}
	return d.where, nil
}

// matchRecord evaluates the expression on a fetched record, before it is
// decoded (no allocation).
func (w *whereMatcher) matchRecord(r *protocol.Record) bool {
	fm := filter.Message{Props: r.Properties, BornTime: r.BornTime, ReconsumeTimes: int64(r.ReconsumeTimes)}
	return w.expr.Match(&fm)
}

func (w *whereMatcher) match(m *Message) bool {
	w.props = appendProps(w.props[:0], m)
	fm := filter.Message{Props: w.props, BornTime: m.BornTime.UnixMilli(), ReconsumeTimes: int64(m.ReconsumeTimes)}
	return w.expr.Match(&fm)
}

// escapedLen is len(protocol.AppendEscaped(nil, s)) without building it.
func escapedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == '~') {
			n += 2
		}
	}
	return n
}
