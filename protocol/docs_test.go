package protocol

import (
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docSyntax is one command syntax line of docs/protocol.md, such as
// `get <topic> <group> <partition> <offset> <maxSize> <opaque> [<maxWaitMs> [<tags> [<where>]]]`.
type docSyntax struct {
	line   string
	name   string   // "put", "query id"
	req    []string // the fields after the name, in order, optional ones marked with a leading '?'
	counts []int    // the field counts (name included) the syntax allows
}

// parseDocSyntax reads the syntax lines of docs/protocol.md's code blocks:
// a line that starts with a lower-case word and names a field (`<…>` or
// `[…]`), or is a bare `quit`. Replies (`result`, `value`), examples and
// the broker's own `check` (sent by the broker, never parsed by it) are not
// syntax lines.
func parseDocSyntax(t *testing.T) []docSyntax {
	t.Helper()
	text, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	word := regexp.MustCompile(`^[a-z]+$`)
	var out []docSyntax
	in := false
	for _, l := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(l, "```") {
			in = !in
			continue
		}
		if !in {
			continue
		}
		l = strings.TrimSpace(l)
		toks := strings.Fields(l)
		if len(toks) == 0 || !word.MatchString(toks[0]) {
			continue
		}
		if toks[0] == "result" || toks[0] == "value" || strings.Contains(l, "sent by the broker") {
			continue
		}
		if l != "quit" && !strings.ContainsAny(l, "<[") {
			continue // an example such as `put test 0 5 0 1\r\n`
		}
		if strings.Contains(l, "…") || strings.Contains(l, " <- ") {
			continue // an abridged line (§8 `put … <opaque>`) or an annotated example (§1)
		}
		// The data block after the line is not a field.
		if i := strings.Index(l, `\r\n`); i >= 0 {
			l = l[:i]
			toks = strings.Fields(l)
		}
		s := docSyntax{line: l, name: toks[0]}
		rest := toks[1:]
		if s.name == "query" && len(rest) > 0 {
			s.name += " " + rest[0]
			rest = rest[1:]
		}
		required, optional := len(strings.Fields(s.name)), 0
		for _, f := range rest {
			if strings.HasPrefix(f, "[") {
				optional++
				s.req = append(s.req, "?"+strings.Trim(f, "[]"))
			} else {
				required++
				s.req = append(s.req, f)
			}
		}
		for n := required; n <= required+optional; n++ {
			s.counts = append(s.counts, n)
		}
		out = append(out, s)
	}
	if len(out) < 20 {
		t.Fatalf("found only %d syntax lines in docs/protocol.md: is the reader broken?", len(out))
	}
	return out
}

// sampleField is a value for a documented field, valid enough that the
// parser gets past the field count.
func sampleField(f string) string {
	if i := strings.IndexByte(f, '|'); i >= 0 {
		f = f[:i] // `on|off`, `<handle>|<len>`: the first
	}
	if !strings.HasPrefix(f, "<") {
		return f // a literal: `runs`, `on`, `commit`
	}
	f = strings.Trim(f, "<>")
	switch f {
	case "topic":
		return "t"
	case "group":
		return "g"
	case "len", "offset", "partition", "flag", "checksum", "maxWaitMs", "brokerId", "slaveId",
		"position", "epoch", "timestampMs", "delayMs":
		return "0"
	case "maxSize":
		return "1024"
	case "count", "max", "maxNum", "msgId", "delayLevel", "timeoutS":
		return "1"
	case "invisibleMs":
		return "1000"
	case "handle":
		return "t:0:1:1"
	case "txKey":
		return "TX:s:1"
	case "type":
		return "BEGIN"
	case "opaque":
		return "7"
	case "item":
		return "topics"
	}
	return "x" // a name, a secret, tags, a where expression, …
}

// tryCount feeds the parser a line of the command with n fields (the
// documented fields in order, optional ones as far as n reaches, padded
// with the opaque) and reports whether the parser refused the field count,
// with the command it saw.
func tryCount(s docSyntax, n int) (wrongCount bool, op Op, msg string) {
	fields := strings.Fields(s.name)
	// Required fields and as many optional ones as n asks for, each
	// optional field in its documented place.
	extra := n - len(fields)
	for _, f := range s.req {
		if !strings.HasPrefix(f, "?") {
			extra--
		}
	}
	for _, f := range s.req {
		switch {
		case !strings.HasPrefix(f, "?"):
			fields = append(fields, sampleField(f))
		case extra > 0:
			fields = append(fields, sampleField(f[1:]))
			extra--
		}
	}
	for ; extra < 0 && len(fields) > 1; extra++ {
		fields = fields[:len(fields)-1]
	}
	for ; extra > 0; extra-- {
		fields = append(fields, "7")
	}
	var p Parser
	var got *Command
	err := p.Parse([]byte(strings.Join(fields, " ")+"\r\n"), func(c *Command) error {
		cc := *c
		got = &cc
		return nil
	})
	var pe *Error
	switch {
	case errors.As(err, &pe):
		msg = pe.Msg
	case err != nil && !errors.Is(err, ErrQuit):
		msg = err.Error()
	case got != nil && got.Err != nil:
		msg = got.Err.Msg
	}
	if got != nil {
		op = got.Op
	}
	// put, sync and mput without their length field cannot be framed: refused too.
	refused := strings.Contains(msg, "wrong number of fields") || strings.Contains(msg, "without a data length") ||
		strings.Contains(msg, "without a block length")
	return refused, op, msg
}

// TestProtocolDocMatchesParser checks docs/protocol.md against the parser
// both ways: every documented command is parsed as that command with every
// field count its syntax allows, every other count up to one past the
// largest is refused as a wrong count (quit, whose extra fields are
// ignored, aside), and every command the parser knows is documented.
func TestProtocolDocMatchesParser(t *testing.T) {
	t.Parallel()
	docs := parseDocSyntax(t)
	byName := map[string][]int{}
	for _, s := range docs {
		for _, n := range s.counts {
			wrong, op, msg := tryCount(s, n)
			if wrong || op.String() != s.name {
				t.Errorf("docs/protocol.md: %q with %d fields: parsed as %s, %q", s.line, n, op, msg)
			}
			if !slices.Contains(byName[s.name], n) {
				byName[s.name] = append(byName[s.name], n)
			}
		}
	}
	for _, s := range docs {
		if s.name == "quit" {
			continue
		}
		for n := len(strings.Fields(s.name)); n <= slices.Max(byName[s.name])+1 && n <= MaxFields; n++ {
			if slices.Contains(byName[s.name], n) {
				continue
			}
			if wrong, op, msg := tryCount(s, n); !wrong {
				t.Errorf("%s with %d fields (name included), which docs/protocol.md does not allow, is accepted (%s, %q)", s.name, n, op, msg)
			}
		}
	}
	for o := OpUnknown + 1; !strings.HasPrefix(o.String(), "op("); o++ {
		if _, ok := byName[o.String()]; !ok {
			t.Errorf("the parser accepts %q, which docs/protocol.md documents no syntax for", o)
		}
	}
}
