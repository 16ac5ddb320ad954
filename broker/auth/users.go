package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"

	"gopkg.in/ini.v1"
)

// The users file (usersFile, or the data of <zkRoot>/config/users) is INI
// text, one section per user (docs/security.md):
//
//	[alice]
//	secret      = $2a$10$…             ; bcrypt hash of the secret (metaq auth hash)
//	signingKey  = 64 hex digits        ; HTTP signatures (optional; metaq auth hash prints it)
//	tokens      = sha256:<hex>, …      ; HTTP bearer tokens, stored as SHA-256 (metaq auth token)
//	publish     = orders.*, invoices   ; topic patterns alice may put to ('*' = any run)
//	subscribe   = orders.*             ; topic patterns alice may read
//	groups      = billing-*            ; consumer groups alice may read, retry and commit as
//	denyPublish = orders.internal      ; deny patterns win over allow patterns
//	denySubscribe =
//	denyGroups  =
//	admin       = false                ; admin: everything, system topics and admin commands
//
// A user without `secret` cannot log in with `auth` (certificate, token or
// signature only). Unknown keys are errors, so a typo never widens rights.

// MaxUsersFile bounds the users file (and the ZooKeeper node) read.
const MaxUsersFile = 4 << 20

// User is one entry of the users file.
type User struct {
	Name       string
	hash       []byte   // bcrypt; nil = no password login
	signingKey []byte   // HMAC key of HTTP signatures; nil = none
	tokens     [][]byte // SHA-256 of bearer tokens
	Perms

	verified atomic.Pointer[[sha256.Size]byte] // SHA-256 of the last secret that passed bcrypt (secret.go)
}

// Perms are a user's rights.
type Perms struct {
	Admin                                  bool
	Publish, Subscribe, Groups             patterns
	DenyPublish, DenySubscribe, DenyGroups patterns
}

// Users is an immutable parsed users file.
type Users struct {
	byName      map[string]*User
	byToken     map[[sha256.Size]byte]*User
	unknownHash []byte // what an unknown user's secret is compared with (secret.go)
}

// Lookup returns the named user.
func (u *Users) Lookup(name string) *User {
	if u == nil {
		return nil
	}
	return u.byName[name]
}

// Names lists the users, sorted.
func (u *Users) Names() []string {
	var out []string
	for n := range u.byName {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

var userKeys = map[string]bool{"secret": true, "signingKey": true, "tokens": true, "publish": true, "subscribe": true,
	"groups": true, "denyPublish": true, "denySubscribe": true, "denyGroups": true, "admin": true}

// ParseUsers parses a users file.
func ParseUsers(data []byte) (*Users, error) {
	if len(data) > MaxUsersFile {
		return nil, fmt.Errorf("users file is larger than %d bytes", MaxUsersFile)
	}
	f, err := ini.LoadSources(ini.LoadOptions{SpaceBeforeInlineComment: true, KeyValueDelimiters: "=", ChildSectionDelimiter: "\x00"}, data)
	if err != nil {
		return nil, err
	}
	us := &Users{byName: map[string]*User{}, byToken: map[[sha256.Size]byte]*User{}}
	var errs []error
	for _, sec := range f.Sections() {
		name := strings.TrimSpace(sec.Name())
		if name == ini.DefaultSection {
			if len(sec.Keys()) > 0 {
				errs = append(errs, errors.New("keys outside a [user] section"))
			}
			continue
		}
		if !validUserName(name) {
			errs = append(errs, fmt.Errorf("[%s]: invalid user name (want [A-Za-z0-9_.@-]{1,64})", name))
			continue
		}
		u := &User{Name: name}
		for _, k := range sec.Keys() {
			key, v := k.Name(), strings.TrimSpace(k.String())
			if !userKeys[key] {
				errs = append(errs, fmt.Errorf("[%s]: unknown key %q", name, key))
				continue
			}
			if err := u.set(key, v); err != nil {
				errs = append(errs, fmt.Errorf("[%s] %s: %v", name, key, err))
			}
		}
		for _, t := range u.tokens {
			var h [sha256.Size]byte
			copy(h[:], t)
			if o := us.byToken[h]; o != nil {
				errs = append(errs, fmt.Errorf("[%s]: a token is also %s's", name, o.Name))
			}
			us.byToken[h] = u
		}
		us.byName[name] = u
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	us.unknownHash = dummyHash(dummyCost(us.byName))
	return us, nil
}

func (u *User) set(key, v string) error {
	switch key {
	case "secret":
		if v == "" {
			return nil
		}
		if !strings.HasPrefix(v, "$2") {
			return errors.New("want a bcrypt hash ($2a$…, from `metaq auth hash`), never the secret itself")
		}
		u.hash = []byte(v)
	case "signingKey":
		if v == "" {
			return nil
		}
		b, err := hex.DecodeString(v)
		if err != nil || len(b) < 16 {
			return errors.New("want at least 32 hex digits (from `metaq auth hash`)")
		}
		u.signingKey = b
	case "tokens":
		for _, t := range splitList(v) {
			h, ok := strings.CutPrefix(t, "sha256:")
			b, err := hex.DecodeString(h)
			if !ok || err != nil || len(b) != sha256.Size {
				return errors.New("want sha256:<64 hex digits> entries (from `metaq auth token`)")
			}
			u.tokens = append(u.tokens, b)
		}
	case "admin":
		switch strings.ToLower(v) {
		case "true", "yes", "1":
			u.Admin = true
		case "false", "no", "0", "":
		default:
			return fmt.Errorf("%q is not a boolean", v)
		}
	default:
		ps, err := parsePatterns(v)
		if err != nil {
			return err
		}
		switch key {
		case "publish":
			u.Publish = ps
		case "subscribe":
			u.Subscribe = ps
		case "groups":
			u.Groups = ps
		case "denyPublish":
			u.DenyPublish = ps
		case "denySubscribe":
			u.DenySubscribe = ps
		case "denyGroups":
			u.DenyGroups = ps
		}
	}
	return nil
}

func splitList(v string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
		out = append(out, f)
	}
	return out
}

func parsePatterns(v string) (patterns, error) {
	var ps patterns
	for _, p := range splitList(v) {
		for i := 0; i < len(p); i++ {
			if c := p[i]; c != '*' && !nameByte(c) {
				return nil, fmt.Errorf("pattern %q: only topic/group name characters and '*'", p)
			}
		}
		if len(p) > 255 {
			return nil, fmt.Errorf("pattern %q is longer than 255 bytes", p)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '%' || c == '-'
}

// validUserName: [A-Za-z0-9_.@-]{1,64}.
func validUserName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != '@' && (c == '%' || !nameByte(c)) {
			return false
		}
	}
	return true
}
