package conf

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Value syntax shared by every key. MetaQ evaluated numeric values with the
// Aviator expression engine, so real server.ini files use products such as
// maxSegmentSize=1024*1024*1024; metaq accepts products of integers for every
// integer, size and duration key, and unit suffixes where noted.

// parseInt parses a decimal integer or a product of decimal integers
// ("1000", "-1", "10*1000"). Spaces around '*' are allowed.
func parseInt(s string) (int64, error) {
	n, err := parseProduct(s, false)
	if err != nil {
		return 0, fmt.Errorf("want an integer or a product like 10*1000")
	}
	return n, nil
}

// ParseSize parses a byte count: a plain integer ("1073741824"), a product
// ("1024*1024*1024") or a number with a binary unit suffix k, m, g or t
// (case-insensitive, optionally followed by "b" or "ib": "1g", "512MB",
// "4KiB"); each factor of a product may carry a suffix ("2*512m"). All units
// are powers of 1024. Negative sizes are rejected.
func ParseSize(s string) (int64, error) {
	n, err := parseProduct(s, true)
	if err != nil {
		return 0, fmt.Errorf("want a byte count like 1048576, 1024*1024 or 1m")
	}
	if n < 0 {
		return 0, fmt.Errorf("must not be negative")
	}
	return n, nil
}

// parseDuration parses a duration key. A bare integer or product is a count
// of unit (milliseconds for MetaQ's *Ms/*Interval keys, seconds for
// idleTimeout); a value with a Go duration unit ("10s", "1m30s", "500ms") is
// taken as written (metaq extension). Negative values are rejected.
func parseDuration(s string, unit time.Duration) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if n, err := parseProduct(s, false); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("must not be negative")
		}
		if n > math.MaxInt64/int64(unit) {
			return 0, fmt.Errorf("too large")
		}
		return time.Duration(n) * unit, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("want %s (e.g. %s) or a duration with a unit (e.g. %s)",
			unitName(unit), unitExample(unit), unitExample2(unit))
	}
	if d < 0 {
		return 0, fmt.Errorf("must not be negative")
	}
	return d, nil
}

func unitName(u time.Duration) string {
	switch u {
	case time.Millisecond:
		return "milliseconds"
	case time.Second:
		return "seconds"
	}
	return u.String()
}

func unitExample(u time.Duration) string {
	if u == time.Millisecond {
		return "10000"
	}
	return "600"
}

func unitExample2(u time.Duration) string {
	if u == time.Millisecond {
		return "10s"
	}
	return "10m"
}

// parseBool accepts true and false, case-insensitively (MetaQ used Aviator
// boolean literals).
func parseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, errors.New("want true or false")
}

var errProduct = errors.New("bad product")

// parseProduct multiplies '*'-separated factors, each an optionally signed
// decimal integer, with an optional binary unit suffix when units is set.
func parseProduct(s string, units bool) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errProduct
	}
	acc := big.NewInt(1)
	for _, f := range strings.Split(s, "*") {
		f = strings.TrimSpace(f)
		mult := int64(1)
		if units {
			f, mult = splitUnit(f)
		}
		if f == "" {
			return 0, errProduct
		}
		digits := f
		if digits[0] == '+' || digits[0] == '-' {
			digits = digits[1:]
		}
		if digits == "" {
			return 0, errProduct
		}
		for i := 0; i < len(digits); i++ {
			if digits[i] < '0' || digits[i] > '9' {
				return 0, errProduct
			}
		}
		v, ok := new(big.Int).SetString(f, 10)
		if !ok {
			return 0, errProduct
		}
		acc.Mul(acc, v)
		acc.Mul(acc, big.NewInt(mult))
		if acc.BitLen() > 80 { // stop runaway products early
			return 0, errProduct
		}
	}
	if !acc.IsInt64() {
		return 0, errProduct
	}
	return acc.Int64(), nil
}

// splitUnit strips a k/m/g/t suffix (optionally followed by "b" or "ib")
// and returns the number part and the multiplier.
func splitUnit(f string) (string, int64) {
	l := strings.ToLower(f)
	if len(l) != len(f) {
		return f, 1 // non-ASCII: left for the digit check to reject
	}
	for _, suf := range []string{"ib", "b"} {
		if n := len(l) - len(suf); n > 0 && strings.HasSuffix(l, suf) && strings.IndexByte("kmgt", l[n-1]) >= 0 {
			l = l[:n]
			break
		}
	}
	if l == "" {
		return f, 1
	}
	var mult int64
	switch l[len(l)-1] {
	case 'k':
		mult = 1 << 10
	case 'm':
		mult = 1 << 20
	case 'g':
		mult = 1 << 30
	case 't':
		mult = 1 << 40
	default:
		return f, 1
	}
	return f[:len(l)-1], mult
}

// FormatSize renders n with the largest binary unit that divides it exactly
// ("1g", "20m", "4k", "1000").
func FormatSize(n int64) string {
	units := []struct {
		s string
		v int64
	}{{"t", 1 << 40}, {"g", 1 << 30}, {"m", 1 << 20}, {"k", 1 << 10}}
	for _, u := range units {
		if n != 0 && n%u.v == 0 {
			return strconv.FormatInt(n/u.v, 10) + u.s
		}
	}
	return strconv.FormatInt(n, 10)
}

// resolvePath expands a leading "~" or "${user.home}" to the home directory
// and makes a relative path absolute against base (the directory of the
// configuration file).
func resolvePath(p, base string) (string, error) {
	p = strings.TrimSpace(p)
	if strings.HasPrefix(p, "${user.home}") || p == "~" || strings.HasPrefix(p, "~/") {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("cannot expand home directory: %v", err)
		}
		if strings.HasPrefix(p, "${user.home}") {
			p = home + p[len("${user.home}"):]
		} else {
			p = home + p[1:]
		}
	}
	if !filepath.IsAbs(p) {
		if base == "" {
			base = "."
		}
		p = filepath.Join(base, p)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	return abs, nil
}

// Retention is a parsed deletePolicy.
//
// MetaQ's two policies are supported: "delete,<age>" removes whole segments
// older than age; "archive,<age>[,<compress>]" is accepted for compatibility
// but not implemented yet: Delete is false, so nothing is removed (the broker
// logs a warning). The zero Retention keeps data forever.
type Retention struct {
	Delete   bool          // delete segments older than Keep
	Keep     time.Duration // maximum age of a segment (its last write)
	Archive  bool          // MetaQ "archive" policy (accepted, not yet implemented: nothing is deleted)
	Compress bool          // archive option (accepted, not yet implemented)
}

// maxKeep bounds retention ages (about 100 years).
const maxKeep = 100 * 366 * 24 * time.Hour

// ParseDeletePolicy parses MetaQ's deletePolicy: "delete,<N>" keeps data N
// hours; the age may also be written "<N>h", "<N>m", "<N>s" (as MetaQ) or
// "<N>d" (days, metaq extension). "archive,<N>[,true|false]" is MetaQ's
// archive policy (accepted, see Retention). The policy name is
// case-insensitive and spaces around commas are ignored. N must be > 0.
func ParseDeletePolicy(s string) (Retention, error) {
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	name := strings.ToLower(parts[0])
	switch name {
	case "delete":
		if len(parts) != 2 {
			return Retention{}, fmt.Errorf("want delete,<hours> (e.g. delete,168 or delete,7d)")
		}
		keep, err := parseKeep(parts[1])
		if err != nil {
			return Retention{}, err
		}
		return Retention{Delete: true, Keep: keep}, nil
	case "archive":
		if len(parts) != 2 && len(parts) != 3 {
			return Retention{}, fmt.Errorf("want archive,<hours>[,true|false]")
		}
		keep, err := parseKeep(parts[1])
		if err != nil {
			return Retention{}, err
		}
		r := Retention{Archive: true, Keep: keep}
		if len(parts) == 3 {
			c, err := parseBool(parts[2])
			if err != nil {
				return Retention{}, fmt.Errorf("archive compress flag: %v", err)
			}
			r.Compress = c
		}
		return r, nil
	case "":
		return Retention{}, fmt.Errorf("empty policy; want delete,<hours>")
	}
	return Retention{}, fmt.Errorf("unknown policy %q; want delete,<hours> (or MetaQ's archive,<hours>)", parts[0])
}

func parseKeep(s string) (time.Duration, error) {
	unit := time.Hour
	num := s
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'h':
			num = s[:n-1]
		case 'm':
			unit, num = time.Minute, s[:n-1]
		case 's':
			unit, num = time.Second, s[:n-1]
		case 'd':
			unit, num = 24*time.Hour, s[:n-1]
		}
	}
	bad := fmt.Errorf("bad age %q: want <N> hours, or <N>h, <N>m, <N>s, <N>d", s)
	if num == "" {
		return 0, bad
	}
	for i := 0; i < len(num); i++ {
		if num[i] < '0' || num[i] > '9' {
			return 0, bad
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n > int64(maxKeep/unit) {
		return 0, fmt.Errorf("age %q is too large", s)
	}
	if n == 0 {
		return 0, fmt.Errorf("age must be > 0 (got %q)", s)
	}
	return time.Duration(n) * unit, nil
}

// String renders the policy in MetaQ syntax ("delete,168", "delete,90m").
// The zero Retention renders as "none".
func (r Retention) String() string {
	var name string
	switch {
	case r.Delete:
		name = "delete"
	case r.Archive:
		name = "archive"
	default:
		return "none"
	}
	s := name + "," + formatKeep(r.Keep)
	if r.Archive && r.Compress {
		s += ",true"
	}
	return s
}

func formatKeep(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10)
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	default:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
}
