package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/metaqgo/metaq/client"
)

// position is a start/reset position (consume --from, offsets reset --to): earliest, latest,
// a time or a queue offset.
type position struct {
	kind   string // earliest, latest, time, offset
	at     time.Time
	offset int64
}

func parseResetTarget(s string, now time.Time) (position, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "earliest", "smallest", "min":
		return position{kind: "earliest"}, nil
	case "latest", "largest", "max":
		return position{kind: "latest"}, nil
	case "":
		return position{}, usageErr("--to is empty: want earliest, latest, a time or an offset")
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 {
		return position{kind: "offset", offset: n}, nil
	}
	t, err := parseTime(s, now)
	if err != nil {
		return position{}, usageErr("%v", err)
	}
	return position{kind: "time", at: t}, nil
}

// resolve asks the broker at addr for the queue offset p names in a partition.
func (p position) resolve(ctx context.Context, adm *client.Admin, addr, topic string, partition int) (int64, error) {
	switch p.kind {
	case "earliest":
		return adm.MinOffset(ctx, addr, topic, partition)
	case "latest":
		return adm.MaxOffset(ctx, addr, topic, partition)
	case "offset":
		return adm.Offset(ctx, addr, topic, partition, p.offset)
	case "time":
		return adm.OffsetForTime(ctx, addr, topic, partition, p.at)
	}
	return 0, errors.New("no position")
}

// parseTime reads a --from/--to time: RFC 3339 (2026-11-29T12:00:00Z, with or without
// fractional seconds; a local time without zone is also accepted), "-<duration>" meaning that
// long ago (-10m), or unix milliseconds with an "@" prefix (@1764417600000).
func parseTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "-") {
		d, err := time.ParseDuration(s[1:])
		if err == nil && d >= 0 {
			return now.Add(-d), nil
		}
	}
	if strings.HasPrefix(s, "@") {
		ms, err := strconv.ParseInt(s[1:], 10, 64)
		if err == nil && ms >= 0 {
			return time.UnixMilli(ms), nil
		}
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("bad time %q: want RFC 3339 (2006-01-02T15:04:05Z07:00), -<duration> (-10m) or @<unix ms>", s)
}
