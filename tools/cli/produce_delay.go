package cli

import (
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/metaqgo/metaq/client"
)

// produceDelay holds produce's delay flags (docs/delay.md).
type produceDelay struct {
	delay     time.Duration
	level     int
	deliverAt string
	at        time.Time // parsed deliverAt
}

func (d *produceDelay) flags(f *pflag.FlagSet) {
	f.DurationVar(&d.delay, "delay", 0, "deliver this long after sending (e.g. 30s, 5m; sent as deliverAt)")
	f.IntVar(&d.level, "delay-level", 0, "deliver after the broker's delay level n (messageDelayLevel; level 3 = 10s by default)")
	f.StringVar(&d.deliverAt, "deliver-at", "", `deliver at this time: RFC 3339 ("2026-12-24T18:00:00+01:00"), "2006-01-02 15:04:05" (local) or unix ms`)
}

func (d *produceDelay) validate() error {
	n := 0
	if d.delay != 0 {
		n++
		if d.delay < 0 {
			return usageErr("--delay must be positive")
		}
	}
	if d.level != 0 {
		n++
		if d.level < 0 {
			return usageErr("--delay-level must be >= 1")
		}
	}
	if d.deliverAt != "" {
		n++
		t, err := parseDeliverAt(d.deliverAt)
		if err != nil {
			return err
		}
		d.at = t
	}
	if n > 1 {
		return usageErr("give only one of --delay, --delay-level and --deliver-at")
	}
	return nil
}

// apply sets the message's delay; --delay counts from now.
func (d *produceDelay) apply(m *client.Message) {
	switch {
	case d.delay > 0:
		m.DeliverAt = time.Now().Add(d.delay)
	case !d.at.IsZero():
		m.DeliverAt = d.at
	case d.level > 0:
		m.DelayLevel = d.level
	}
}

func parseDeliverAt(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil && ms >= 0 {
		return time.UnixMilli(ms), nil
	}
	for _, layout := range []string{time.RFC3339Nano, time.RFC3339} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	for _, layout := range []string{"2006-01-02 15:04:05", "2006-01-02T15:04:05", "2006-01-02 15:04"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, usageErr("bad --deliver-at %q: want RFC 3339, \"2006-01-02 15:04:05\" or unix ms", s)
}
