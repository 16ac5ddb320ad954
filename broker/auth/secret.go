package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"

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

// dummyHash keeps the time of a login for an unknown user close to a
// known user's (no user enumeration by timing).
var dummyHash, _ = bcrypt.GenerateFromPassword([]byte("metaq-no-such-user"), bcrypt.MinCost)
