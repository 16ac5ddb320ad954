package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"sync"

	"golang.org/x/crypto/bcrypt"
)

// HashSecret returns the bcrypt hash to store as a user's `secret`.
func HashSecret(secret string, cost int) (string, error) {
	if cost == 0 {
		cost = bcrypt.DefaultCost
	}
	h, err := bcrypt.GenerateFromPassword([]byte(secret), cost)
	return string(h), err
}

// SigningKey derives a user's HTTP signing key from the secret:
// hex(HMAC-SHA256(secret, "metaq-http-v1\x00" + user)). The broker stores
// only this key (signingKey), never the secret; a client computes it from
// the secret it knows. It is secret-equivalent for HTTP signatures only.
func SigningKey(user, secret string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("metaq-http-v1\x00" + user))
	return hex.EncodeToString(m.Sum(nil))
}

// NewToken returns a random bearer token and the `tokens` entry that
// stores it (sha256:<hex>).
func NewToken() (token, entry string) {
	var b [32]byte
	_, _ = rand.Read(b[:])
	token = "mqt_" + hex.EncodeToString(b[:])
	return token, TokenEntry(token)
}

// TokenEntry is the stored form of a bearer token.
func TokenEntry(token string) string {
	h := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(h[:])
}

// checkSecret compares secret against u's bcrypt hash. The SHA-256 of the
// last secret that passed is kept, so a client that reconnects with the
// right secret costs one hash, not one bcrypt run; a wrong secret always
// costs bcrypt (and the caller throttles failures per address).
func (u *User) checkSecret(secret []byte) bool {
	if u == nil || u.hash == nil {
		return false
	}
	sum := sha256.Sum256(secret)
	if v := u.verified.Load(); v != nil && subtle.ConstantTimeCompare(v[:], sum[:]) == 1 {
		return true
	}
	if bcrypt.CompareHashAndPassword(u.hash, secret) != nil {
		return false
	}
	u.verified.Store(&sum)
	return true
}

// dummyHashes are the hashes an unknown user's secret (or one given for a
// user without a secret) is compared with, one per bcrypt cost: the
// comparison then costs what a wrong secret of a real user costs (no user
// enumeration by timing, docs/security.md). Made once per cost and kept.
var dummyHashes struct {
	mu sync.Mutex
	by map[int][]byte
}

// dummyHash returns the dummy hash at bcrypt cost cost.
func dummyHash(cost int) []byte {
	dummyHashes.mu.Lock()
	defer dummyHashes.mu.Unlock()
	if h := dummyHashes.by[cost]; h != nil {
		return h
	}
	h, err := bcrypt.GenerateFromPassword([]byte("metaq-no-such-user"), cost)
	if err != nil { // cost out of range: cannot come from a parsed hash
		h, _ = bcrypt.GenerateFromPassword([]byte("metaq-no-such-user"), bcrypt.DefaultCost)
	}
	if dummyHashes.by == nil {
		dummyHashes.by = map[int][]byte{}
	}
	dummyHashes.by[cost] = h
	return h
}

// dummyCost is the cost of the dummy hash for a user table: the highest
// cost of its users' hashes (an unknown user is then never faster than a
// real one), bcrypt's default cost (what `metaq auth hash` writes) when no
// user has a secret.
func dummyCost(byName map[string]*User) int {
	c := 0
	for _, u := range byName {
		if u.hash == nil {
			continue
		}
		if n, err := bcrypt.Cost(u.hash); err == nil && n > c {
			c = n
		}
	}
	if c == 0 {
		c = bcrypt.DefaultCost
	}
	return c
}

// dummy is the hash Authenticate compares a secret with when the user is
// unknown or has no secret.
func (u *Users) dummy() []byte {
	if u.unknownHash != nil {
		return u.unknownHash
	}
	return dummyHash(bcrypt.DefaultCost) // the empty table of New
}
