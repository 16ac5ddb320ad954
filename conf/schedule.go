package conf

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Schedule tells when a periodic job (retention, deleteWhen) runs next.
type Schedule interface {
	// Next returns the first fire time strictly after after, or the zero
	// Time when the schedule never fires again.
	Next(after time.Time) time.Time
}

// ParseSchedule parses a deleteWhen value. Two forms are accepted:
//
//   - a Quartz cron expression, as MetaQ used: 6 or 7 whitespace-separated
//     fields "second minute hour day-of-month month day-of-week [year]"
//     with *, ? (day-of-month or day-of-week only), lists (6,18), ranges
//     (1-5, wrapping ranges such as 22-2 or FRI-MON), steps (*/10, 0/15,
//     10-40/5), month names JAN-DEC and day names SUN-SAT (case-insensitive;
//     day-of-week numbers are Quartz's 1-7 with 1 = SUN). Years are
//     1970-2099. Quartz's L, W and # are not supported and are rejected.
//     Quartz requires ? in exactly one of day-of-month and day-of-week;
//     metaq also accepts * in both (= every day), but rejects two
//     restricted day fields.
//   - "@every <duration>" (metaq extension, handy in tests): fires every
//     duration after the previous fire time, e.g. "@every 10m".
//
// Cron fields are matched against the wall clock of after's location (the
// broker passes time.Now(), i.e. local time, as Quartz used the JVM's zone).
// Daylight-saving transitions: a time that does not exist (skipped by a
// spring-forward) fires that much later (02:30 in a 02:00→03:00 gap fires at
// 03:30); a time that exists twice (fall-back) fires once, at its first
// occurrence still after after.
//
// The returned Schedule also implements fmt.Stringer (the expression as
// given, trimmed).
func ParseSchedule(s string) (Schedule, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("empty schedule")
	}
	if strings.HasPrefix(s, "@") {
		f := strings.Fields(s)
		if strings.EqualFold(f[0], "@every") {
			if len(f) != 2 {
				return nil, fmt.Errorf("want @every <duration>, e.g. @every 10m")
			}
			d, err := time.ParseDuration(f[1])
			if err != nil || d <= 0 {
				return nil, fmt.Errorf("@every: bad duration %q (want e.g. 10m, 30s, 1h)", f[1])
			}
			return every{d: d, spec: s}, nil
		}
		return nil, fmt.Errorf("unknown schedule %q (want a Quartz cron expression or @every <duration>)", f[0])
	}
	return parseCron(s)
}

type every struct {
	d    time.Duration
	spec string
}

func (e every) Next(after time.Time) time.Time { return after.Add(e.d) }
func (e every) String() string                 { return e.spec }

// bitset holds the allowed values of one field; index = value - field.min.
type bitset [3]uint64

func (b *bitset) set(i int)      { b[i>>6] |= 1 << (i & 63) }
func (b *bitset) has(i int) bool { return i >= 0 && i < 192 && b[i>>6]&(1<<(i&63)) != 0 }

type cronField struct {
	name     string
	min, max int
	names    []string // names[i] is value min+i (months, days)
}

var cronFields = [7]cronField{
	{name: "second", min: 0, max: 59},
	{name: "minute", min: 0, max: 59},
	{name: "hour", min: 0, max: 23},
	{name: "day-of-month", min: 1, max: 31},
	{name: "month", min: 1, max: 12, names: []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}},
	{name: "day-of-week", min: 1, max: 7, names: []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}},
	{name: "year", min: 1970, max: 2099},
}

const (
	fSec = iota
	fMin
	fHour
	fDom
	fMonth
	fDow
	fYear
)

type cron struct {
	spec    string
	f       [7]bitset
	anyYear bool
	useDow  bool // day-of-month is '?': match days by day-of-week
	maxYear int
}

func parseCron(s string) (*cron, error) {
	fields := strings.Fields(s)
	if len(fields) != 6 && len(fields) != 7 {
		return nil, fmt.Errorf("cron %q has %d fields; want 6 or 7 (Quartz: second minute hour day-of-month month day-of-week [year])", s, len(fields))
	}
	c := &cron{spec: s, anyYear: true}
	var noSpec [7]bool
	for i, expr := range fields {
		ns, err := c.parseField(i, strings.ToUpper(expr))
		if err != nil {
			return nil, fmt.Errorf("cron %q: %s %q: %v", s, cronFields[i].name, expr, err)
		}
		noSpec[i] = ns
	}
	if len(fields) == 7 && fields[fYear] != "*" {
		c.anyYear = false
		for y := cronFields[fYear].max; y >= cronFields[fYear].min; y-- {
			if c.f[fYear].has(y - cronFields[fYear].min) {
				c.maxYear = y
				break
			}
		}
	}
	switch {
	case noSpec[fDom] && noSpec[fDow]:
		return nil, fmt.Errorf("cron %q: '?' may be used in day-of-month or day-of-week, not both", s)
	case noSpec[fDom]:
		c.useDow = true
	case noSpec[fDow]:
	case fields[fDom] == "*":
		c.useDow = true // "* ... MON-FRI": days by day-of-week
	case fields[fDow] == "*":
	default:
		return nil, fmt.Errorf("cron %q: restricting both day-of-month and day-of-week is not supported (Quartz); put '?' in one of them", s)
	}
	if c.Next(time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, fmt.Errorf("cron %q never fires", s)
	}
	return c, nil
}

// parseField fills c.f[i]; it reports whether the field is '?'.
func (c *cron) parseField(i int, expr string) (bool, error) {
	fd := cronFields[i]
	if expr == "?" {
		if i != fDom && i != fDow {
			return false, fmt.Errorf("'?' is only allowed in day-of-month and day-of-week")
		}
		for v := fd.min; v <= fd.max; v++ {
			c.f[i].set(v - fd.min)
		}
		return true, nil
	}
	if strings.ContainsAny(expr, "LW#") && !(fd.names != nil && onlyNames(expr, fd.names)) {
		return false, fmt.Errorf("Quartz's L, W and # are not supported")
	}
	for _, item := range strings.Split(expr, ",") {
		if item == "" {
			return false, fmt.Errorf("empty list element")
		}
		if item == "?" {
			return false, fmt.Errorf("'?' must stand alone")
		}
		rng, stepStr, hasStep := strings.Cut(item, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepStr)
			if err != nil || n < 1 {
				return false, fmt.Errorf("bad step %q", stepStr)
			}
			if n > fd.max-fd.min+1 {
				return false, fmt.Errorf("step %d is larger than the field's range %d-%d", n, fd.min, fd.max)
			}
			step = n
		}
		var lo, hi int
		switch {
		case rng == "*":
			lo, hi = fd.min, fd.max
		case strings.Contains(rng, "-"):
			a, b, _ := strings.Cut(rng, "-")
			var err error
			if lo, err = fd.value(a); err != nil {
				return false, err
			}
			if hi, err = fd.value(b); err != nil {
				return false, err
			}
		default:
			var err error
			if lo, err = fd.value(rng); err != nil {
				return false, err
			}
			hi = lo
			if hasStep { // Quartz: "5/15" = from 5 every 15 to the end
				hi = fd.max
			}
		}
		span := fd.max - fd.min + 1
		n := hi - lo + 1
		if hi < lo { // wrapping range, e.g. 22-2 or FRI-MON
			if i == fYear {
				return false, fmt.Errorf("year range %d-%d is backwards", lo, hi)
			}
			n += span
		}
		for k := 0; k < n; k += step {
			v := lo + k
			if v > fd.max {
				v -= span
			}
			c.f[i].set(v - fd.min)
		}
	}
	return false, nil
}

func onlyNames(expr string, names []string) bool {
	// Day and month names contain L and W (JUL, WED, ...): strip them before
	// looking for Quartz's special characters.
	for _, n := range names {
		expr = strings.ReplaceAll(expr, n, "")
	}
	return !strings.ContainsAny(expr, "LW#")
}

func (fd cronField) value(s string) (int, error) {
	if s == "" {
		return 0, fmt.Errorf("empty value")
	}
	for i, n := range fd.names {
		if s == n {
			return fd.min + i, nil
		}
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		if fd.names != nil {
			return 0, fmt.Errorf("bad value (want %d-%d or %s-%s)", fd.min, fd.max, fd.names[0], fd.names[len(fd.names)-1])
		}
		return 0, fmt.Errorf("bad value (want %d-%d)", fd.min, fd.max)
	}
	if v < fd.min || v > fd.max {
		if fd.name == "day-of-week" && v == 0 {
			return 0, fmt.Errorf("0 is out of range 1-7 (Quartz counts days 1 = SUN ... 7 = SAT)")
		}
		return 0, fmt.Errorf("%d is out of range %d-%d", v, fd.min, fd.max)
	}
	return v, nil
}

func (c *cron) String() string { return c.spec }

func (c *cron) has(i, v int) bool { return c.f[i].has(v - cronFields[i].min) }

func (c *cron) dayMatches(y, mo, d int) bool {
	if c.useDow {
		wd := int(time.Date(y, time.Month(mo), d, 12, 0, 0, 0, time.UTC).Weekday()) + 1
		return c.has(fDow, wd)
	}
	return c.has(fDom, d)
}

// wall is a wall-clock time without a zone.
type wall struct{ y, mo, d, h, mi, s int }

func daysIn(y, mo int) int {
	return time.Date(y, time.Month(mo)+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// nextWall returns the first wall-clock time >= w that matches every field.
func (c *cron) nextWall(w wall) (wall, bool) {
	last := w.y + 400 // the Gregorian calendar repeats every 400 years
	if !c.anyYear {
		last = c.maxYear
	}
	y, mo, d, h, mi, s := w.y, w.mo, w.d, w.h, w.mi, w.s
	for ; y <= last; y, mo, d, h, mi, s = y+1, 1, 1, 0, 0, 0 {
		if !c.anyYear && !c.has(fYear, y) {
			continue
		}
		for ; mo <= 12; mo, d, h, mi, s = mo+1, 1, 0, 0, 0 {
			if !c.has(fMonth, mo) {
				continue
			}
			for dim := daysIn(y, mo); d <= dim; d, h, mi, s = d+1, 0, 0, 0 {
				if !c.dayMatches(y, mo, d) {
					continue
				}
				for ; h < 24; h, mi, s = h+1, 0, 0 {
					if !c.has(fHour, h) {
						continue
					}
					for ; mi < 60; mi, s = mi+1, 0 {
						if !c.has(fMin, mi) {
							continue
						}
						for ; s < 60; s++ {
							if c.has(fSec, s) {
								return wall{y, mo, d, h, mi, s}, true
							}
						}
					}
				}
			}
		}
	}
	return wall{}, false
}

func wallOf(t time.Time) wall {
	y, mo, d := t.Date()
	h, mi, s := t.Clock()
	return wall{y, int(mo), d, h, mi, s}
}

func (w wall) utc() time.Time {
	return time.Date(w.y, time.Month(w.mo), w.d, w.h, w.mi, w.s, 0, time.UTC)
}

// Next implements Schedule.
func (c *cron) Next(after time.Time) time.Time {
	loc := after.Location()
	w := wallOf(after.Truncate(time.Second).Add(time.Second))
	for {
		m, ok := c.nextWall(w)
		if !ok {
			return time.Time{}
		}
		if t, ok := resolveWall(m, loc, after); ok {
			return t
		}
		w = wallOf(m.utc().Add(time.Second))
	}
}

// resolveWall maps wall-clock time w in loc to the earliest instant after
// after that shows w. A w skipped by a DST gap maps to w shifted by the gap.
// It reports false when every instant showing w is not after after.
func resolveWall(w wall, loc *time.Location, after time.Time) (time.Time, bool) {
	u := w.utc()
	r := time.Date(w.y, time.Month(w.mo), w.d, w.h, w.mi, w.s, 0, loc)
	if loc == time.UTC {
		return r, r.After(after)
	}
	// Zone transitions are far apart: the offsets a day before and after r,
	// and at r, cover every instant whose wall clock can read w.
	var best time.Time
	exists := false
	for _, probe := range [3]time.Time{r.Add(-24 * time.Hour), r, r.Add(24 * time.Hour)} {
		_, off := probe.Zone()
		t := u.Add(-time.Duration(off) * time.Second).In(loc)
		if wallOf(t) != w {
			continue
		}
		exists = true
		if t.After(after) && (best.IsZero() || t.Before(best)) {
			best = t
		}
	}
	if !best.IsZero() {
		return best, true
	}
	if exists {
		return time.Time{}, false
	}
	// w falls in a spring-forward gap: read it with the offset in force
	// before the gap, which lands the same distance past the gap's end.
	_, off := r.Add(-24 * time.Hour).Zone()
	t := u.Add(-time.Duration(off) * time.Second).In(loc)
	return t, t.After(after)
}
