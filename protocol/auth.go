package protocol

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strconv"
)

// auth <user> <secret> <opaque> (docs/security.md): authenticate the
// connection. The secret is URL query-escaped ('+' or %20 is a space, %2B a
// plus), so any secret can be typed in telnet; it travels as typed, which is
// why the auth command belongs on the TLS port. Parse errors never quote the
// secret (they may be logged).

// MaxUserLen is the longest user name.
const MaxUserLen = 64

func (p *Parser) parseAuth(line []byte, nf int) {
	c := &p.cmd
	c.Op = OpAuth
	if nf != 4 {
		p.lastOpaque(line, nf)
		p.bad("wrong number of fields for auth: " + strconv.Itoa(nf) + ", usage: auth <user> <secret> <opaque>")
		return
	}
	p.opaqueAt(line, 3)
	if u := p.f(line, 1); !validUser(u) {
		p.bad("invalid user name (want [A-Za-z0-9_.@-]{1,64})")
		return
	}
	if s := p.f(line, 2); len(s) > 1024 || hasCtl(s) {
		p.bad("invalid secret (at most 1024 bytes, URL-escaped, no control characters)")
		return
	}
	p.ix.user, p.ix.key = 1, 2
}

func validUser(b []byte) bool {
	if len(b) == 0 || len(b) > MaxUserLen {
		return false
	}
	for _, c := range b {
		if c != '@' && (c == '%' || !nameChar[c]) {
			return false
		}
	}
	return true
}

// AppendUnescaped appends the URL-unescaped raw (a secret) to dst.
func AppendUnescaped(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		var c byte
		c, i = unescapeAt(raw, i)
		dst = append(dst, c)
	}
	return dst
}

// AppendAuth encodes `auth <user> <escaped secret> <opaque>\r\n`.
func AppendAuth(dst []byte, user, secret string, opaque int32) []byte {
	dst = append(dst, "auth "...)
	dst = append(dst, user...)
	dst = append(dst, ' ')
	dst = appendQueryEscaped(dst, secret)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(opaque), 10)
	return append(dst, "\r\n"...)
}

func appendQueryEscaped(dst []byte, s string) []byte {
	const hexd = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.', c == '~':
			dst = append(dst, c)
		default:
			dst = append(dst, '%', hexd[c>>4], hexd[c&15])
		}
	}
	return dst
}

// ErrAuth is returned (wrapped) by Login when the broker refuses the
// credentials.
var ErrAuth = errors.New("broker refused the credentials")

// loginOpaque is the opaque of Login's request (a connection's first
// request: nothing else is in flight).
const loginOpaque = 2147483600

// Login authenticates a connection on which no other request was sent yet:
// it writes `auth` and reads the reply (bounded by nc's deadline).
func Login(nc net.Conn, user, secret string) error {
	if _, err := nc.Write(AppendAuth(nil, user, secret, loginOpaque)); err != nil {
		return err
	}
	br := bufio.NewReaderSize(nc, MaxLineLen)
	rep, err := NewReplyReader(br, MaxLineLen).Next()
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	if rep.Code != StatusSuccess || rep.Opaque != loginOpaque {
		return fmt.Errorf("%w: %d %s", ErrAuth, rep.Code, rep.Body)
	}
	if br.Buffered() > 0 {
		return errors.New("auth: unexpected data after the reply")
	}
	return nil
}
