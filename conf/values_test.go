package conf

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	t.Parallel()
	good := []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"1073741824", 1 << 30},
		{"1024*1024*1024", 1 << 30},
		{" 1024 * 1024 ", 1 << 20},
		{"4*1024*1024", 4 << 20},
		{"1k", 1 << 10},
		{"4K", 4 << 10},
		{"4kb", 4 << 10},
		{"4KiB", 4 << 10},
		{"512m", 512 << 20},
		{"512MB", 512 << 20},
		{"1g", 1 << 30},
		{"1G", 1 << 30},
		{"2gib", 2 << 30},
		{"1t", 1 << 40},
		{"2*512m", 1 << 30},
		{"20m", 20 << 20},
		{"+8", 8},
	}
	for _, tc := range good {
		got, err := ParseSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	bad := []string{"", " ", "-1", "-1*1024", "1x", "1.5g", "*", "1**2", "1*", "*1", "1kk", "1b", "g",
		"kb", "99999999999999999999", "1024*1024*1024*1024*1024*1024*1024", "1e6", "0x10", "１", "1 024", "8192g*8192g"}
	for _, in := range bad {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestParseInt(t *testing.T) {
	t.Parallel()
	good := map[string]int64{"0": 0, "-1": -1, "+5": 5, "1000": 1000, "10*1000": 10000, "-2*3": -6, "2 * -3": -6, "007": 7}
	for in, want := range good {
		got, err := parseInt(in)
		if err != nil || got != want {
			t.Errorf("parseInt(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "1k", "1.0", "one", "--1", "1-", "9223372036854775808", "3037000500*3037000500"} {
		if got, err := parseInt(in); err == nil {
			t.Errorf("parseInt(%q) = %d, want an error", in, got)
		}
	}
}

func TestParseDuration(t *testing.T) {
	t.Parallel()
	good := []struct {
		in   string
		unit time.Duration
		want time.Duration
	}{
		{"10000", time.Millisecond, 10 * time.Second},
		{"10*1000", time.Millisecond, 10 * time.Second},
		{"0", time.Millisecond, 0},
		{"10s", time.Millisecond, 10 * time.Second},
		{"1m30s", time.Millisecond, 90 * time.Second},
		{"500ms", time.Millisecond, 500 * time.Millisecond},
		{"600", time.Second, 10 * time.Minute},
		{"10m", time.Second, 10 * time.Minute},
		{"1h", time.Second, time.Hour},
	}
	for _, tc := range good {
		got, err := parseDuration(tc.in, tc.unit)
		if err != nil || got != tc.want {
			t.Errorf("parseDuration(%q, %v) = %v, %v; want %v", tc.in, tc.unit, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "-1", "-5s", "10 s", "ten", "1.5", "10x", "99999999999999999"} {
		if got, err := parseDuration(in, time.Second); err == nil {
			t.Errorf("parseDuration(%q) = %v, want an error", in, got)
		}
	}
}

func TestParseBool(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]bool{"true": true, "false": false, "TRUE": true, "False": false, " true ": true} {
		got, err := parseBool(in)
		if err != nil || got != want {
			t.Errorf("parseBool(%q) = %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "yes", "1", "0", "on", "t"} {
		if _, err := parseBool(in); err == nil {
			t.Errorf("parseBool(%q): want an error", in)
		}
	}
}

func TestParseDeletePolicy(t *testing.T) {
	t.Parallel()
	good := []struct {
		in   string
		want Retention
		str  string
	}{
		{"delete,168", Retention{Delete: true, Keep: 168 * time.Hour}, "delete,168"},
		{"delete,10h", Retention{Delete: true, Keep: 10 * time.Hour}, "delete,10"},
		{"delete,10m", Retention{Delete: true, Keep: 10 * time.Minute}, "delete,10m"},
		{"delete,10s", Retention{Delete: true, Keep: 10 * time.Second}, "delete,10s"},
		{"delete,90s", Retention{Delete: true, Keep: 90 * time.Second}, "delete,90s"},
		{"delete,7d", Retention{Delete: true, Keep: 7 * 24 * time.Hour}, "delete,168"},
		{" DELETE , 24 ", Retention{Delete: true, Keep: 24 * time.Hour}, "delete,24"},
		{"archive,48", Retention{Archive: true, Keep: 48 * time.Hour}, "archive,48"},
		{"archive,48,true", Retention{Archive: true, Compress: true, Keep: 48 * time.Hour}, "archive,48,true"},
		{"archive,48,false", Retention{Archive: true, Keep: 48 * time.Hour}, "archive,48"},
	}
	for _, tc := range good {
		got, err := ParseDeletePolicy(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseDeletePolicy(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			continue
		}
		if got.String() != tc.str {
			t.Errorf("%q: String() = %q, want %q", tc.in, got.String(), tc.str)
		}
		back, err := ParseDeletePolicy(got.String())
		if err != nil || back != got {
			t.Errorf("%q: round trip %q = %+v, %v", tc.in, got.String(), back, err)
		}
	}
	bad := []string{"", "delete", "delete,", "delete,0", "delete,0h", "delete,-1", "delete,1.5", "delete,10H",
		"delete,h", "delete,1,2", "purge,1", "archive", "archive,1,maybe", "delete,99999999999", "delete,1w"}
	for _, in := range bad {
		if got, err := ParseDeletePolicy(in); err == nil {
			t.Errorf("ParseDeletePolicy(%q) = %+v, want an error", in, got)
		}
	}
	if s := (Retention{}).String(); s != "none" {
		t.Errorf("zero Retention = %q", s)
	}
}

func TestFormatSize(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0", 1000: "1000", 1 << 10: "1k", 20 << 20: "20m", 1 << 30: "1g", 3 << 40: "3t", 1536: "1536"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
		if back, err := ParseSize(FormatSize(n)); err != nil || back != n {
			t.Errorf("ParseSize(FormatSize(%d)) = %d, %v", n, back, err)
		}
	}
}

func TestResolvePath(t *testing.T) {
	home, err := os.UserHomeDir()
	if err != nil {
		t.Skip("no home directory")
	}
	base := t.TempDir()
	cwd, _ := os.Getwd()
	cases := []struct{ in, base, want string }{
		{"data", base, filepath.Join(base, "data")},
		{"../run/data", filepath.Join(base, "conf"), filepath.Join(base, "run", "data")},
		{"/var/lib/metaq", base, "/var/lib/metaq"},
		{"/var/lib/../metaq/", base, "/var/metaq"},
		{"~", base, home},
		{"~/meta", base, filepath.Join(home, "meta")},
		{"${user.home}/meta", base, filepath.Join(home, "meta")},
		{"data", "", filepath.Join(cwd, "data")},
		{"~user/x", base, filepath.Join(base, "~user", "x")},
	}
	for _, tc := range cases {
		got, err := resolvePath(tc.in, tc.base)
		if err != nil || got != tc.want {
			t.Errorf("resolvePath(%q, %q) = %q, %v; want %q", tc.in, tc.base, got, err, tc.want)
		}
	}
}
