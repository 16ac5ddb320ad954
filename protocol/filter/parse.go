// Package filter compiles and evaluates message filter expressions: the
// SQL92 subset RocketMQ offers for subscriptions (MessageSelector.bySql),
// over a message's properties. The broker evaluates them in `get`; the Go
// client compiles them too, to refuse a bad expression at Subscribe and to
// check delivered messages again. docs/protocol.md ("Expression filters")
// describes the language and how a get carries it.
//
// Grammar (keywords case-insensitive):
//
//	expr      = and { OR and }
//	and       = not { AND not }
//	not       = NOT not | primary
//	primary   = '(' expr ')' | TRUE | FALSE | operand predicate
//	predicate = cmp operand                         cmp: = <> < <= > >=
//	          | [NOT] BETWEEN operand AND operand
//	          | [NOT] IN '(' literal { ',' literal } ')'
//	          | IS [NOT] NULL
//	operand   = name | "quoted name" | literal
//	literal   = 'string' ('' is a quote) | number | TRUE | FALSE
//
// A compiled Expr is immutable and safe for concurrent use; evaluating it
// does not allocate.
package filter

import (
	"strconv"
	"strings"
)

// Limits of an expression. A get line is at most 4096 bytes, so longer
// expressions could not travel anyway.
const (
	MaxLen   = 4096
	maxDepth = 64 // nesting of parentheses and NOT
)

// SyntaxError is a compile error. Pos is the 1-based byte column in the
// expression where the problem was found.
type SyntaxError struct {
	Pos int
	Msg string
}

func (e *SyntaxError) Error() string {
	return "filter: syntax error at position " + strconv.Itoa(e.Pos) + ": " + e.Msg
}

type tokKind uint8

const (
	tEOF tokKind = iota
	tIdent
	tString
	tNumber
	tLParen
	tRParen
	tComma
	tEq
	tNe
	tLt
	tLe
	tGt
	tGe
	tAnd
	tOr
	tNot
	tBetween
	tIn
	tIs
	tNull
	tTrue
	tFalse
)

var tokNames = [...]string{
	tEOF: "end of expression", tIdent: "name", tString: "string", tNumber: "number",
	tLParen: "'('", tRParen: "')'", tComma: "','", tEq: "'='", tNe: "'<>'", tLt: "'<'",
	tLe: "'<='", tGt: "'>'", tGe: "'>='", tAnd: "AND", tOr: "OR", tNot: "NOT",
	tBetween: "BETWEEN", tIn: "IN", tIs: "IS", tNull: "NULL", tTrue: "TRUE", tFalse: "FALSE",
}

var keywords = map[string]tokKind{
	"AND": tAnd, "OR": tOr, "NOT": tNot, "BETWEEN": tBetween, "IN": tIn, "IS": tIs,
	"NULL": tNull, "TRUE": tTrue, "FALSE": tFalse,
}

type token struct {
	kind tokKind
	pos  int    // 0-based start
	text string // identifier / unquoted string / number text
}

// lexer turns the source into tokens one at a time.
type lexer struct {
	src string
	pos int
}

func isIdentStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '$'
}

func isIdentPart(c byte) bool { return isIdentStart(c) || isDigit(c) || c == '.' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (l *lexer) next() (token, error) {
	s := l.src
	for l.pos < len(s) && (s[l.pos] == ' ' || s[l.pos] == '\t' || s[l.pos] == '\r' || s[l.pos] == '\n') {
		l.pos++
	}
	start := l.pos
	if start >= len(s) {
		return token{kind: tEOF, pos: start}, nil
	}
	c := s[start]
	tok := func(k tokKind, n int) (token, error) {
		l.pos += n
		return token{kind: k, pos: start}, nil
	}
	switch {
	case c == '(':
		return tok(tLParen, 1)
	case c == ')':
		return tok(tRParen, 1)
	case c == ',':
		return tok(tComma, 1)
	case c == '=':
		return tok(tEq, 1)
	case c == '<':
		if start+1 < len(s) && s[start+1] == '>' {
			return tok(tNe, 2)
		}
		if start+1 < len(s) && s[start+1] == '=' {
			return tok(tLe, 2)
		}
		return tok(tLt, 1)
	case c == '>':
		if start+1 < len(s) && s[start+1] == '=' {
			return tok(tGe, 2)
		}
		return tok(tGt, 1)
	case c == '\'':
		return l.quoted('\'', tString)
	case c == '"':
		return l.quoted('"', tIdent)
	case isDigit(c) || c == '.' || c == '-' || c == '+':
		return l.number()
	case isIdentStart(c):
		i := start + 1
		for i < len(s) && isIdentPart(s[i]) {
			i++
		}
		l.pos = i
		word := s[start:i]
		if k, ok := keywords[strings.ToUpper(word)]; ok {
			return token{kind: k, pos: start}, nil
		}
		return token{kind: tIdent, pos: start, text: word}, nil
	}
	if c == '!' && start+1 < len(s) && s[start+1] == '=' {
		return token{}, &SyntaxError{Pos: start + 1, Msg: "'!=' is not SQL92: use '<>'"}
	}
	return token{}, &SyntaxError{Pos: start + 1, Msg: "unexpected character " + strconv.QuoteRune(rune(c))}
}

// quoted reads a 'string' or a "quoted name"; a doubled quote stands for
// one.
func (l *lexer) quoted(q byte, k tokKind) (token, error) {
	s := l.src
	start := l.pos
	var b strings.Builder
	for i := start + 1; i < len(s); i++ {
		if s[i] != q {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == q {
			b.WriteByte(q)
			i++
			continue
		}
		l.pos = i + 1
		if k == tIdent && b.Len() == 0 {
			return token{}, &SyntaxError{Pos: start + 1, Msg: "empty quoted name"}
		}
		return token{kind: k, pos: start, text: b.String()}, nil
	}
	what := "string"
	if k == tIdent {
		what = "quoted name"
	}
	return token{}, &SyntaxError{Pos: start + 1, Msg: "unterminated " + what}
}

// number reads [+-] digits [. digits] [e [+-] digits] (or .digits).
func (l *lexer) number() (token, error) {
	s := l.src
	start := l.pos
	i := start
	if s[i] == '-' || s[i] == '+' {
		i++
	}
	digits := 0
	for i < len(s) && isDigit(s[i]) {
		i++
		digits++
	}
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && isDigit(s[i]) {
			i++
			digits++
		}
	}
	if digits == 0 {
		return token{}, &SyntaxError{Pos: start + 1, Msg: "malformed number"}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '-' || s[i] == '+') {
			i++
		}
		e := 0
		for i < len(s) && isDigit(s[i]) {
			i++
			e++
		}
		if e == 0 {
			return token{}, &SyntaxError{Pos: start + 1, Msg: "malformed number"}
		}
	}
	if i < len(s) && isIdentPart(s[i]) {
		return token{}, &SyntaxError{Pos: i + 1, Msg: "unexpected character " + strconv.QuoteRune(rune(s[i])) + " after a number"}
	}
	l.pos = i
	return token{kind: tNumber, pos: start, text: s[start:i]}, nil
}

// parser is a recursive-descent parser with one token of lookahead.
type parser struct {
	lex   lexer
	tok   token
	depth int
	e     *Expr
}

// Compile parses and checks src.
func Compile(src string) (*Expr, error) {
	if len(src) > MaxLen {
		return nil, &SyntaxError{Pos: MaxLen + 1, Msg: "expression longer than " + strconv.Itoa(MaxLen) + " bytes"}
	}
	for i := 0; i < len(src); i++ {
		if c := src[i]; (c < 0x20 && c != '\t' && c != '\r' && c != '\n') || c == 0x7f {
			return nil, &SyntaxError{Pos: i + 1, Msg: "control character in expression"}
		}
	}
	p := &parser{lex: lexer{src: src}, e: &Expr{src: src}}
	if err := p.advance(); err != nil {
		return nil, err
	}
	if p.tok.kind == tEOF {
		return nil, p.errf("empty expression")
	}
	root, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	if p.tok.kind != tEOF {
		return nil, p.unexpected("AND, OR or the end")
	}
	p.e.root = root
	p.e.assignSlots()
	p.e.compileSignature()
	for i := range p.e.nodes {
		n := &p.e.nodes[i]
		if n.op == opIn {
			n.strList = true
			for j := range n.list {
				n.strList = n.strList && n.list[j].k == kStr
			}
		}
	}
	return p.e, nil
}

// MustCompile is Compile that panics on error (for constants in tests and
// examples).
func MustCompile(src string) *Expr {
	e, err := Compile(src)
	if err != nil {
		panic(err)
	}
	return e
}

func (p *parser) advance() error {
	t, err := p.lex.next()
	if err != nil {
		return err
	}
	p.tok = t
	return nil
}

func (p *parser) errf(msg string) error { return &SyntaxError{Pos: p.tok.pos + 1, Msg: msg} }

func (p *parser) unexpected(want string) error {
	got := tokNames[p.tok.kind]
	switch p.tok.kind {
	case tIdent:
		got = "name " + strconv.Quote(p.tok.text)
	case tNumber:
		got = "number " + p.tok.text
	case tString:
		got = "string " + quoteSQL(p.tok.text)
	}
	return p.errf("expected " + want + ", found " + got)
}

func (p *parser) expect(k tokKind) error {
	if p.tok.kind != k {
		return p.unexpected(tokNames[k])
	}
	return p.advance()
}

func (p *parser) add(n node) int32 {
	p.e.nodes = append(p.e.nodes, n)
	return int32(len(p.e.nodes) - 1)
}

func (p *parser) parseOr() (int32, error) {
	l, err := p.parseAnd()
	if err != nil {
		return 0, err
	}
	for p.tok.kind == tOr {
		if err := p.advance(); err != nil {
			return 0, err
		}
		r, err := p.parseAnd()
		if err != nil {
			return 0, err
		}
		l = p.add(node{op: opOr, a: l, b: r})
	}
	return l, nil
}

func (p *parser) parseAnd() (int32, error) {
	l, err := p.parseNot()
	if err != nil {
		return 0, err
	}
	for p.tok.kind == tAnd {
		if err := p.advance(); err != nil {
			return 0, err
		}
		r, err := p.parseNot()
		if err != nil {
			return 0, err
		}
		l = p.add(node{op: opAnd, a: l, b: r})
	}
	return l, nil
}

func (p *parser) enter() error {
	if p.depth++; p.depth > maxDepth {
		return p.errf("expression nested deeper than " + strconv.Itoa(maxDepth) + " levels")
	}
	return nil
}

func (p *parser) parseNot() (int32, error) {
	if p.tok.kind != tNot {
		return p.parsePrimary()
	}
	if err := p.enter(); err != nil {
		return 0, err
	}
	if err := p.advance(); err != nil {
		return 0, err
	}
	x, err := p.parseNot()
	if err != nil {
		return 0, err
	}
	p.depth--
	return p.add(node{op: opNot, a: x}), nil
}

func (p *parser) parsePrimary() (int32, error) {
	switch p.tok.kind {
	case tLParen:
		if err := p.enter(); err != nil {
			return 0, err
		}
		if err := p.advance(); err != nil {
			return 0, err
		}
		x, err := p.parseOr()
		if err != nil {
			return 0, err
		}
		if err := p.expect(tRParen); err != nil {
			return 0, err
		}
		p.depth--
		return x, nil
	case tTrue, tFalse:
		k := p.tok.kind
		if err := p.advance(); err != nil {
			return 0, err
		}
		if !isPredicateStart(p.tok.kind) {
			if k == tTrue {
				return p.add(node{op: opTrue}), nil
			}
			return p.add(node{op: opFalse}), nil
		}
		return p.parsePredicate(operand{lit: value{k: kBool, b: k == tTrue}}, tokNames[k])
	}
	start := p.tok
	x, err := p.parseOperand()
	if err != nil {
		return 0, err
	}
	if !isPredicateStart(p.tok.kind) {
		if x.prop != nil {
			return 0, p.unexpected("a comparison, BETWEEN, IN or IS after " + strconv.Quote(x.prop.name))
		}
		return 0, p.unexpected("a comparison after " + describe(start))
	}
	return p.parsePredicate(x, describe(start))
}

func isPredicateStart(k tokKind) bool {
	switch k {
	case tEq, tNe, tLt, tLe, tGt, tGe, tNot, tBetween, tIn, tIs:
		return true
	}
	return false
}

func describe(t token) string {
	switch t.kind {
	case tIdent:
		return strconv.Quote(t.text)
	case tString:
		return quoteSQL(t.text)
	case tNumber:
		return t.text
	}
	return tokNames[t.kind]
}

func quoteSQL(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func (p *parser) parsePredicate(x operand, xs string) (int32, error) {
	switch k := p.tok.kind; k {
	case tEq, tNe, tLt, tLe, tGt, tGe:
		cmpPos := p.tok.pos
		if err := p.advance(); err != nil {
			return 0, err
		}
		ys := describe(p.tok)
		ypos := p.tok.pos
		y, err := p.parseOperand()
		if err != nil {
			return 0, err
		}
		c := cmpOf[k]
		if c != cmpEq && c != cmpNe {
			if err := ordered(x, xs, cmpPos); err != nil {
				return 0, err
			}
			if err := ordered(y, ys, ypos); err != nil {
				return 0, err
			}
		}
		return p.add(node{op: opCmp, cmp: c, x: x, y: y}), nil
	case tIs:
		if err := p.advance(); err != nil {
			return 0, err
		}
		neg := false
		if p.tok.kind == tNot {
			neg = true
			if err := p.advance(); err != nil {
				return 0, err
			}
		}
		if err := p.expect(tNull); err != nil {
			return 0, err
		}
		return p.add(node{op: opIsNull, neg: neg, x: x}), nil
	}
	neg := false
	if p.tok.kind == tNot {
		neg = true
		if err := p.advance(); err != nil {
			return 0, err
		}
	}
	switch p.tok.kind {
	case tBetween:
		pos := p.tok.pos
		if err := ordered(x, xs, pos); err != nil {
			return 0, err
		}
		if err := p.advance(); err != nil {
			return 0, err
		}
		lo, err := p.orderedOperand()
		if err != nil {
			return 0, err
		}
		if err := p.expect(tAnd); err != nil {
			return 0, err
		}
		hi, err := p.orderedOperand()
		if err != nil {
			return 0, err
		}
		return p.add(node{op: opBetween, neg: neg, x: x, y: lo, z: hi}), nil
	case tIn:
		if err := p.advance(); err != nil {
			return 0, err
		}
		if err := p.expect(tLParen); err != nil {
			return 0, err
		}
		var list []value
		for {
			switch p.tok.kind {
			case tString, tNumber, tTrue, tFalse:
			default:
				return 0, p.unexpected("a literal in the IN list")
			}
			y, err := p.parseOperand()
			if err != nil {
				return 0, err
			}
			list = append(list, y.lit)
			if p.tok.kind != tComma {
				break
			}
			if err := p.advance(); err != nil {
				return 0, err
			}
		}
		if err := p.expect(tRParen); err != nil {
			return 0, err
		}
		return p.add(node{op: opIn, neg: neg, x: x, list: list}), nil
	}
	return 0, p.unexpected("BETWEEN or IN after NOT")
}

func (p *parser) orderedOperand() (operand, error) {
	s, pos := describe(p.tok), p.tok.pos
	y, err := p.parseOperand()
	if err != nil {
		return y, err
	}
	return y, ordered(y, s, pos)
}

// ordered refuses a literal that cannot be ordered (RocketMQ: "<, <=, >,
// >= and BETWEEN need numbers").
func ordered(x operand, s string, pos int) error {
	if x.prop == nil && x.lit.k != kNum {
		return &SyntaxError{Pos: pos + 1, Msg: s + " cannot be ordered: <, <=, >, >= and BETWEEN compare numbers"}
	}
	return nil
}

var cmpOf = map[tokKind]cmpOp{tEq: cmpEq, tNe: cmpNe, tLt: cmpLt, tLe: cmpLe, tGt: cmpGt, tGe: cmpGe}

// parseOperand reads a name or a literal.
func (p *parser) parseOperand() (operand, error) {
	t := p.tok
	var x operand
	switch t.kind {
	case tIdent:
		x.prop = p.e.property(t.text)
	case tString:
		x.lit = value{k: kStr, s: []byte(t.text)}
	case tNumber:
		v, ok := parseNumber([]byte(t.text))
		if !ok {
			return x, p.errf("number " + t.text + " out of range")
		}
		x.lit = v
	case tTrue, tFalse:
		x.lit = value{k: kBool, b: t.kind == tTrue}
	case tNull:
		return x, p.errf("NULL compares as unknown: use IS NULL or IS NOT NULL")
	default:
		return x, p.unexpected("a name or a literal")
	}
	return x, p.advance()
}
