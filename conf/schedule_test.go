package conf

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // DST tests must not depend on the host's zoneinfo
)

func utc(s string) time.Time {
	t, err := time.Parse("2006-01-02 15:04:05", s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestScheduleNextUTC(t *testing.T) {
	t.Parallel()
	cases := []struct {
		spec, after, want string
	}{
		// MetaQ's default: 06:00 and 18:00 every day.
		{"0 0 6,18 * * ?", "2026-01-01 00:00:00", "2026-01-01 06:00:00"},
		{"0 0 6,18 * * ?", "2026-01-01 06:00:00", "2026-01-01 18:00:00"},
		{"0 0 6,18 * * ?", "2026-01-01 05:59:59", "2026-01-01 06:00:00"},
		{"0 0 6,18 * * ?", "2026-01-01 18:00:00", "2026-01-02 06:00:00"},
		{"0 0 6,18 * * ?", "2026-12-31 23:00:00", "2027-01-01 06:00:00"},
		// Steps and ranges.
		{"*/10 * * * * ?", "2026-03-01 10:00:05", "2026-03-01 10:00:10"},
		{"0/15 * * * * ?", "2026-03-01 10:00:45", "2026-03-01 10:01:00"},
		{"5/15 * * * * ?", "2026-03-01 10:00:51", "2026-03-01 10:01:05"},
		{"0 10-40/15 * * * ?", "2026-03-01 10:41:00", "2026-03-01 11:10:00"},
		{"0 0 22-2 * * ?", "2026-03-01 03:00:00", "2026-03-01 22:00:00"},
		{"0 0 22-2 * * ?", "2026-03-01 23:30:00", "2026-03-02 00:00:00"},
		{"0 0 22-2/2 * * ?", "2026-03-01 22:00:00", "2026-03-02 00:00:00"},
		{"0 0 22-2/2 * * ?", "2026-03-02 00:00:00", "2026-03-02 02:00:00"},
		{"0 30 * * * ?", "2026-03-01 10:30:00", "2026-03-01 11:30:00"},
		{"* * * * * ?", "2026-03-01 10:30:00", "2026-03-01 10:30:01"},
		// Sub-second after: next whole second.
		{"* * * * * ?", "2026-03-01 10:30:00.5", "2026-03-01 10:30:01"},
		// Day of week: Quartz numbering (1 = SUN), names, wrapping range.
		// 2026-03-02 is a Monday.
		{"0 0 9 ? * MON-FRI", "2026-02-27 10:00:00", "2026-03-02 09:00:00"}, // Fri after 9 → Mon
		{"0 0 9 ? * 2-6", "2026-02-27 10:00:00", "2026-03-02 09:00:00"},
		{"0 0 9 ? * 1", "2026-03-02 00:00:00", "2026-03-08 09:00:00"},
		{"0 0 9 ? * SUN", "2026-03-02 00:00:00", "2026-03-08 09:00:00"},
		{"0 0 9 ? * sat,sun", "2026-03-02 00:00:00", "2026-03-07 09:00:00"},
		{"0 0 9 ? * FRI-MON", "2026-03-03 00:00:00", "2026-03-06 09:00:00"}, // Tue → Fri
		{"0 0 9 * * MON", "2026-03-03 00:00:00", "2026-03-09 09:00:00"},     // * day-of-month = ?
		// Day of month, months.
		{"0 0 0 1 * ?", "2026-01-15 00:00:00", "2026-02-01 00:00:00"},
		{"0 0 0 31 * ?", "2026-04-01 00:00:00", "2026-05-31 00:00:00"}, // April has 30 days
		{"0 0 0 29 2 ?", "2026-01-01 00:00:00", "2028-02-29 00:00:00"}, // leap day
		{"0 0 0 29 FEB ?", "2028-02-29 00:00:00", "2032-02-29 00:00:00"},
		{"0 0 12 15 JAN,jul ?", "2026-02-01 00:00:00", "2026-07-15 12:00:00"},
		{"0 0 12 */10 * ?", "2026-03-12 00:00:00", "2026-03-21 12:00:00"},
		{"0 0 0 1 NOV-FEB ?", "2026-03-01 00:00:00", "2026-11-01 00:00:00"},
		// Year field.
		{"0 0 0 1 1 ? 2030", "2026-06-01 00:00:00", "2030-01-01 00:00:00"},
		{"0 0 0 1 1 ? 2027-2029/2", "2027-06-01 00:00:00", "2029-01-01 00:00:00"},
		{"0 0 0 1 1 ? *", "2026-06-01 00:00:00", "2027-01-01 00:00:00"},
		{"0 0 0 1 1 ? 2020", "2026-06-01 00:00:00", ""}, // never again
		{"0 0 0 1 1 ? 2099", "2099-01-01 00:00:00", ""},
		// Whitespace and case.
		{"  0   0  6,18 *\t* ?  ", "2026-01-01 07:00:00", "2026-01-01 18:00:00"},
	}
	for _, tc := range cases {
		s, err := ParseSchedule(tc.spec)
		if err != nil {
			t.Errorf("ParseSchedule(%q): %v", tc.spec, err)
			continue
		}
		after := utc(tc.after[:19])
		if len(tc.after) > 19 {
			after = after.Add(500 * time.Millisecond)
		}
		got := s.Next(after)
		if tc.want == "" {
			if !got.IsZero() {
				t.Errorf("%q.Next(%s) = %s, want never", tc.spec, tc.after, got)
			}
			continue
		}
		if want := utc(tc.want); !got.Equal(want) || got.Location() != time.UTC {
			t.Errorf("%q.Next(%s) = %s, want %s", tc.spec, tc.after, got, want)
		}
	}
}

func TestScheduleErrors(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"":                       "empty",
		"0 0 6 * *":              "want 6 or 7",
		"0 0 6 * * ? 2026 x":     "want 6 or 7",
		"60 0 6 * * ?":           "out of range",
		"0 60 6 * * ?":           "out of range",
		"0 0 24 * * ?":           "out of range",
		"0 0 6 0 * ?":            "out of range",
		"0 0 6 32 * ?":           "out of range",
		"0 0 6 * 13 ?":           "out of range",
		"0 0 6 ? * 0":            "1 = SUN",
		"0 0 6 ? * 8":            "out of range",
		"0 0 6 * * ? 1969":       "out of range",
		"0 0 6 * * ? 2100":       "out of range",
		"0 0 6 ? * ?":            "not both",
		"0 0 6 1 * MON":          "both day-of-month and day-of-week",
		"? 0 6 * * ?":            "only allowed",
		"0 0 6 1,? * ?":          "stand alone",
		"0 0 6 L * ?":            "not supported",
		"0 0 6 15W * ?":          "not supported",
		"0 0 6 ? * 6L":           "not supported",
		"0 0 6 ? * 6#3":          "not supported",
		"0 0 6 ? * MON#2":        "not supported",
		"0 0 6 LW * ?":           "not supported",
		"0 0 6 * FOO ?":          "bad value",
		"0 0 x * * ?":            "bad value",
		"0 0 6, * * ?":           "empty list",
		"0 0 */0 * * ?":          "bad step",
		"0 0 */25 * * ?":         "larger than",
		"0 0 1-/2 * * ?":         "empty value",
		"0 0 0 30 2 ?":           "never fires",
		"0 0 0 31 4,6,9,11 ?":    "never fires",
		"0 0 0 1 1 ? 2030-2027":  "backwards",
		"@every":                 "@every <duration>",
		"@every 0s":              "bad duration",
		"@every -1m":             "bad duration",
		"@every ten":             "bad duration",
		"@daily":                 "unknown schedule",
		"0 0 0 29 2 ? 2025,2026": "never fires",
	}
	for spec, want := range cases {
		_, err := ParseSchedule(spec)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSchedule(%q) = %v, want an error containing %q", spec, err, want)
		}
	}
}

func TestScheduleString(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{"0 0 6,18 * * ?", "@every 10m"} {
		s, err := ParseSchedule(" " + spec + " ")
		if err != nil {
			t.Fatal(err)
		}
		if got := s.(fmt.Stringer).String(); got != spec {
			t.Errorf("String() = %q, want %q", got, spec)
		}
	}
}

func TestScheduleEvery(t *testing.T) {
	t.Parallel()
	s, err := ParseSchedule("@every 10m")
	if err != nil {
		t.Fatal(err)
	}
	after := utc("2026-01-01 00:00:07")
	if got, want := s.Next(after), utc("2026-01-01 00:10:07"); !got.Equal(want) {
		t.Errorf("Next = %s, want %s", got, want)
	}
	s, err = ParseSchedule("@EVERY 150ms")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Next(after); got.Sub(after) != 150*time.Millisecond {
		t.Errorf("Next = %s", got)
	}
}

// TestScheduleDST checks wall-clock semantics across daylight-saving
// transitions in America/New_York (2026: clocks go 02:00 EST → 03:00 EDT on
// March 8 and 02:00 EDT → 01:00 EST on November 1) and Australia/Lord_Howe
// (half-hour shifts).
func TestScheduleDST(t *testing.T) {
	t.Parallel()
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	lh, err := time.LoadLocation("Australia/Lord_Howe")
	if err != nil {
		t.Fatal(err)
	}
	at := func(loc *time.Location, s string, off int) time.Time {
		// A wall-clock time plus its UTC offset in hours×10 (to pick one
		// side of an ambiguous time).
		w := utc(s)
		return w.Add(-time.Duration(off) * 6 * time.Minute).In(loc)
	}
	cases := []struct {
		name        string
		spec        string
		after, want time.Time
	}{
		{"daily 6,18 on a normal day", "0 0 6,18 * * ?",
			at(ny, "2026-01-10 07:00:00", -50), at(ny, "2026-01-10 18:00:00", -50)},
		{"daily 6 across spring forward", "0 0 6,18 * * ?",
			at(ny, "2026-03-07 18:00:00", -50), at(ny, "2026-03-08 06:00:00", -40)},
		{"daily 6 across fall back", "0 0 6,18 * * ?",
			at(ny, "2026-10-31 18:00:00", -40), at(ny, "2026-11-01 06:00:00", -50)},
		{"gap time fires shifted by the gap", "0 30 2 * * ?",
			at(ny, "2026-03-07 02:30:00", -50), at(ny, "2026-03-08 03:30:00", -40)},
		{"gap time, after just before the gap", "0 30 2 * * ?",
			at(ny, "2026-03-08 01:59:00", -50), at(ny, "2026-03-08 03:30:00", -40)},
		{"after the shifted gap time: next day", "0 30 2 * * ?",
			at(ny, "2026-03-08 03:30:00", -40), at(ny, "2026-03-09 02:30:00", -40)},
		{"every 20 minutes into the gap", "0 */20 * * * ?",
			at(ny, "2026-03-08 01:40:00", -50), at(ny, "2026-03-08 03:00:00", -40)},
		{"every 20 minutes after the gap", "0 */20 * * * ?",
			at(ny, "2026-03-08 03:00:00", -40), at(ny, "2026-03-08 03:20:00", -40)},
		{"ambiguous time fires at its first occurrence", "0 30 1 * * ?",
			at(ny, "2026-11-01 00:00:00", -40), at(ny, "2026-11-01 01:30:00", -40)},
		{"ambiguous time fires once", "0 30 1 * * ?",
			at(ny, "2026-11-01 01:30:00", -40), at(ny, "2026-11-02 01:30:00", -50)},
		{"started in the repeated hour: its second occurrence", "0 30 1 * * ?",
			at(ny, "2026-11-01 01:10:00", -50), at(ny, "2026-11-01 01:30:00", -50)},
		{"every 20 minutes through the fall back", "0 */20 * * * ?",
			at(ny, "2026-11-01 01:40:00", -40), at(ny, "2026-11-01 02:00:00", -50)},
		{"Lord Howe half-hour gap", "0 10 2 * * ?",
			at(lh, "2026-10-03 03:00:00", 105), at(lh, "2026-10-04 02:40:00", 110)},
		{"Lord Howe ambiguous half hour, first occurrence", "0 40 1 * * ?",
			at(lh, "2026-04-05 00:00:00", 110), at(lh, "2026-04-05 01:40:00", 110)},
	}
	for _, tc := range cases {
		s, err := ParseSchedule(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		got := s.Next(tc.after)
		if !got.Equal(tc.want) {
			t.Errorf("%s: %q.Next(%s) = %s, want %s", tc.name, tc.spec, tc.after, got, tc.want)
		}
		if got.Location() != tc.after.Location() {
			t.Errorf("%s: result in %v, want %v", tc.name, got.Location(), tc.after.Location())
		}
	}
}

// TestScheduleLocal checks that fields are read in after's location, here
// the process's local zone.
func TestScheduleLocal(t *testing.T) {
	t.Parallel()
	s, err := ParseSchedule(DefaultDeleteWhen)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Date(2026, 5, 20, 12, 0, 0, 0, time.Local)
	got := s.Next(after)
	if want := time.Date(2026, 5, 20, 18, 0, 0, 0, time.Local); !got.Equal(want) {
		t.Errorf("Next(%s) = %s, want %s", after, got, want)
	}
	got = s.Next(got)
	if want := time.Date(2026, 5, 21, 6, 0, 0, 0, time.Local); !got.Equal(want) {
		t.Errorf("second Next = %s, want %s", got, want)
	}
}

// TestScheduleBruteForce compares Next with a second-by-second scan.
func TestScheduleBruteForce(t *testing.T) {
	t.Parallel()
	specs := []string{
		"*/7 * * * * ?", "0 */13 * * * ?", "30 5-10,50 * * * ?", "0 0 */5 * * ?", "15 45 23 * * ?",
		"0 0 12 ? * TUE,THU", "0 0 0 28-31 * ?", "59 59 23 L-1 * ?",
	}
	ny, _ := time.LoadLocation("America/New_York")
	rng := rand.New(rand.NewSource(1))
	for _, spec := range specs {
		s, err := ParseSchedule(spec)
		if err != nil {
			if strings.Contains(spec, "L") {
				continue // L is rejected; covered by TestScheduleErrors
			}
			t.Fatalf("%q: %v", spec, err)
		}
		c := s.(*cron)
		for _, loc := range []*time.Location{time.UTC, ny} {
			start := time.Date(2026, time.Month(1+rng.Intn(12)), 1+rng.Intn(28), rng.Intn(24), rng.Intn(60), rng.Intn(60), 0, loc)
			if loc == ny { // cross the fall-back weekend as well
				start = time.Date(2026, 10, 30, 0, 0, 0, 0, ny)
			}
			tm := start
			for i := 0; i < 40 && tm.Sub(start) < 3*24*time.Hour; i++ {
				next := s.Next(tm)
				if !next.After(tm) {
					t.Fatalf("%q: Next(%s) = %s is not after", spec, tm, next)
				}
				if next.Sub(tm) > 40*24*time.Hour {
					t.Fatalf("%q: Next(%s) = %s is too far", spec, tm, next)
				}
				// Every second strictly between tm and next must not match
				// (except during a fall-back's repeated hour, which fires
				// once).
				for x := tm.Truncate(time.Second).Add(time.Second); x.Before(next); x = x.Add(time.Second) {
					if matches(c, x) && !repeatedHour(x) {
						t.Fatalf("%q: Next(%s) = %s skips %s", spec, tm, next, x)
					}
				}
				if !matches(c, next) {
					t.Fatalf("%q: Next(%s) = %s does not match", spec, tm, next)
				}
				tm = next
			}
		}
	}
}

func matches(c *cron, t time.Time) bool {
	w := wallOf(t)
	return c.has(fSec, w.s) && c.has(fMin, w.mi) && c.has(fHour, w.h) && c.dayMatches(w.y, w.mo, w.d) && c.has(fMonth, w.mo)
}

// repeatedHour reports whether t's wall clock also occurred an hour earlier.
func repeatedHour(t time.Time) bool {
	return wallOf(t.Add(-time.Hour)) == wallOf(t)
}
