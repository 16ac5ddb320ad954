package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// HTTP request signatures (docs/security.md, "Signed HTTP requests"):
//
//	Authorization: MQ1-HMAC-SHA256 Credential=<user>, Timestamp=<unix seconds>, Signature=<64 hex>
//
// Signature = hex(HMAC-SHA256(signingKey, stringToSign)) with
//
//	stringToSign = "MQ1-HMAC-SHA256\n" + METHOD + "\n" + path + "\n" +
//	               canonical query + "\n" + hex(SHA-256(body)) + "\n" + timestamp
//
// where path is the request's escaped path, the canonical query is the
// query re-encoded with its keys sorted (url.Values.Encode), and signingKey
// is SigningKey(user, secret). A timestamp further than the window from the
// broker's clock is refused, and so is a signature already seen within the
// window (a bounded cache).

// SignatureScheme is the Authorization scheme of signed requests.
const SignatureScheme = "MQ1-HMAC-SHA256"

// maxSigHeader bounds the Authorization header parsed.
const maxSigHeader = 512

// SigHeader is a parsed signature header.
type SigHeader struct {
	User      string
	Timestamp int64
	Signature [sha256.Size]byte
}

var errSigHeader = errors.New("malformed " + SignatureScheme + " Authorization header: want Credential=<user>, Timestamp=<unix seconds>, Signature=<64 hex digits>")

// ParseSigHeader parses the value of an Authorization header of scheme
// SignatureScheme (the scheme included).
func ParseSigHeader(h string) (SigHeader, error) {
	var s SigHeader
	if len(h) > maxSigHeader {
		return s, errSigHeader
	}
	rest, ok := strings.CutPrefix(h, SignatureScheme+" ")
	if !ok {
		return s, errSigHeader
	}
	var seen [3]bool
	for _, part := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return s, errSigHeader
		}
		switch k {
		case "Credential":
			if seen[0] || !validUserName(v) {
				return s, errSigHeader
			}
			seen[0], s.User = true, v
		case "Timestamp":
			if seen[1] || len(v) == 0 || len(v) > 12 {
				return s, errSigHeader
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 || v[0] == '+' {
				return s, errSigHeader
			}
			seen[1], s.Timestamp = true, n
		case "Signature":
			if seen[2] || len(v) != 2*sha256.Size {
				return s, errSigHeader
			}
			if _, err := hex.Decode(s.Signature[:], []byte(v)); err != nil {
				return s, errSigHeader
			}
			seen[2] = true
		default:
			return s, errSigHeader
		}
	}
	if !seen[0] || !seen[1] || !seen[2] {
		return s, errSigHeader
	}
	return s, nil
}

// StringToSign builds the signed text of a request.
func StringToSign(method, escapedPath, rawQuery string, body []byte, timestamp int64) []byte {
	q, err := url.ParseQuery(rawQuery)
	canon := rawQuery
	if err == nil {
		canon = q.Encode()
	}
	bh := sha256.Sum256(body)
	var b bytes.Buffer
	b.WriteString(SignatureScheme)
	b.WriteByte('\n')
	b.WriteString(method)
	b.WriteByte('\n')
	b.WriteString(escapedPath)
	b.WriteByte('\n')
	b.WriteString(canon)
	b.WriteByte('\n')
	b.WriteString(hex.EncodeToString(bh[:]))
	b.WriteByte('\n')
	b.WriteString(strconv.FormatInt(timestamp, 10))
	return b.Bytes()
}

// Sign computes the signature with a hex signing key.
func Sign(signingKeyHex string, stringToSign []byte) (string, error) {
	key, err := hex.DecodeString(signingKeyHex)
	if err != nil {
		return "", errors.New("signing key is not hex")
	}
	m := hmac.New(sha256.New, key)
	m.Write(stringToSign)
	return hex.EncodeToString(m.Sum(nil)), nil
}

// SignRequest sets the Authorization header of req (whose body is body)
// for user with signingKey (hex) at now.
func SignRequest(req *http.Request, user, signingKey string, body []byte, now time.Time) error {
	ts := now.Unix()
	sig, err := Sign(signingKey, StringToSign(req.Method, req.URL.EscapedPath(), req.URL.RawQuery, body, ts))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", SignatureScheme+" Credential="+user+", Timestamp="+strconv.FormatInt(ts, 10)+", Signature="+sig)
	return nil
}

// replayCache remembers the signatures seen within the window. It is
// bounded: when full after dropping expired entries, new signed requests
// are refused (errReplayFull) rather than remembered poorly.
type replayCache struct {
	mu   sync.Mutex
	seen map[[sha256.Size]byte]int64 // signature → expiry (unix seconds)
	max  int
	next int64 // earliest expiry worth a sweep
}

var (
	errExpired    = errors.New("signature timestamp is outside the allowed window (check the client's clock)")
	errReplayed   = errors.New("signature was already used (replay)")
	errReplayFull = errors.New("too many signed requests within the replay window; retry later")
	errBadSig     = errors.New("signature does not match")
)

func (c *replayCache) add(sig [sha256.Size]byte, now, expiry int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[[sha256.Size]byte]int64{}
	}
	if exp, ok := c.seen[sig]; ok && exp >= now {
		return errReplayed
	}
	if len(c.seen) >= c.max {
		for k, exp := range c.seen {
			if exp < now {
				delete(c.seen, k)
			}
		}
		if len(c.seen) >= c.max {
			return errReplayFull
		}
	}
	c.seen[sig] = expiry
	return nil
}

// Verifier checks signed requests.
type Verifier struct {
	A      *Authorizer
	Window time.Duration
	now    func() time.Time
	cache  replayCache
}

// NewVerifier returns a Verifier with a replay cache of maxEntries (default 200,000).
func NewVerifier(a *Authorizer, window time.Duration, maxEntries int) *Verifier {
	if maxEntries <= 0 {
		maxEntries = 200000
	}
	if window <= 0 {
		window = 5 * time.Minute
	}
	return &Verifier{A: a, Window: window, now: time.Now, cache: replayCache{max: maxEntries}}
}

// Verify checks a parsed header against the request; it returns the user.
func (v *Verifier) Verify(h SigHeader, method, escapedPath, rawQuery string, body []byte) (string, error) {
	now := v.now().Unix()
	win := int64(v.Window / time.Second)
	if h.Timestamp < now-win || h.Timestamp > now+win {
		return "", errExpired
	}
	u := v.A.Users().Lookup(h.User)
	if u == nil || u.signingKey == nil {
		return "", errBadSig
	}
	m := hmac.New(sha256.New, u.signingKey)
	m.Write(StringToSign(method, escapedPath, rawQuery, body, h.Timestamp))
	if !hmac.Equal(m.Sum(nil), h.Signature[:]) {
		return "", errBadSig
	}
	// Only a valid signature enters the cache (an attacker cannot fill it
	// without the key); it stays until the timestamp leaves the window.
	if err := v.cache.add(h.Signature, now, h.Timestamp+win); err != nil {
		return "", err
	}
	return u.Name, nil
}
