package protocol

import (
	"bytes"
	"strings"
	"testing"
)

func parseAuthLine(t testing.TB, line string) (Command, bool) {
	var got Command
	n := 0
	p := &Parser{}
	_ = p.Parse([]byte(line), func(c *Command) error {
		n++
		got = *c
		got.User = append([]byte(nil), c.User...)
		got.Key = append([]byte(nil), c.Key...)
		return nil
	})
	return got, n == 1
}

func TestParseAuth(t *testing.T) {
	c, ok := parseAuthLine(t, "auth alice s%20e+cret%2B 7\r\n")
	if !ok || c.Err != nil || c.Op != OpAuth || string(c.User) != "alice" || c.Opaque != 7 {
		t.Fatalf("got %+v", c)
	}
	if s := string(AppendUnescaped(nil, c.Key)); s != "s e cret+" {
		t.Fatalf("secret %q", s)
	}
	for _, bad := range []string{
		"auth alice 7\r\n",
		"auth alice secret x\r\n",
		"auth al%ce secret 7\r\n",
		"auth " + strings.Repeat("u", 65) + " secret 7\r\n",
		"auth alice " + strings.Repeat("s", 1025) + " 7\r\n",
		"auth alice sec\x01ret 7\r\n",
	} {
		c, ok := parseAuthLine(t, bad)
		if !ok || c.Err == nil || c.Err.Code != StatusBadRequest {
			t.Errorf("%q: %+v", bad, c)
			continue
		}
		if strings.Contains(c.Err.Msg, "sec\x01ret") || strings.Contains(c.Err.Msg, "sssss") {
			t.Errorf("%q: the error quotes the secret: %s", bad, c.Err.Msg)
		}
	}
}

func TestAppendAuthRoundTrip(t *testing.T) {
	for _, secret := range []string{"", "plain", "with space+plus%", "\x00\xff\r\n", strings.Repeat("x", 300)} {
		line := AppendAuth(nil, "bob", secret, 42)
		c, ok := parseAuthLine(t, string(line))
		if !ok {
			t.Fatalf("%q: no command", line)
		}
		if secret == "" { // an empty secret is an empty field: wrong field count
			if c.Err == nil {
				t.Fatalf("empty secret accepted: %+v", c)
			}
			continue
		}
		if c.Err != nil || !bytes.Equal(AppendUnescaped(nil, c.Key), []byte(secret)) || c.Opaque != 42 {
			t.Fatalf("%q: %+v", secret, c)
		}
	}
}

// FuzzAuth: any auth line parses to exactly one command or one error,
// never quotes the secret field in its error, and an encoded secret always
// comes back unchanged.
func FuzzAuth(f *testing.F) {
	f.Add("alice", "secret", "7")
	f.Add("a@b.c", "%zz%2", "-1")
	f.Add("", "", "")
	f.Add("u", "s e", "2147483648")
	f.Fuzz(func(t *testing.T, user, secret, opaque string) {
		line := "auth " + user + " " + secret + " " + opaque + "\r\n"
		if len(line) > MaxLineLen || strings.ContainsAny(line[:len(line)-2], "\r\n") {
			return
		}
		c, _ := parseAuthLine(t, line)
		if c.Err != nil && len(secret) >= 8 && strings.Contains(c.Err.Msg, secret) {
			t.Fatalf("error quotes the secret: %q", c.Err.Msg)
		}
		if c.Err == nil {
			if c.Op != OpAuth || !validUser(c.User) {
				t.Fatalf("%q: %+v", line, c)
			}
		}
		if validUser([]byte(user)) && secret != "" {
			enc := AppendAuth(nil, user, secret, 1)
			if len(enc) <= MaxLineLen {
				c, ok := parseAuthLine(t, string(enc))
				if ok && len(secret) <= 1024/3 && (c.Err != nil || string(AppendUnescaped(nil, c.Key)) != secret) {
					t.Fatalf("round trip of %q: %+v", secret, c)
				}
			}
		}
	})
}
