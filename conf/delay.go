package conf

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// DefaultMessageDelayLevel is RocketMQ's ladder of delay levels: level n
// (1-based) waits the n-th duration.
const DefaultMessageDelayLevel = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

// DefaultMaxReconsumeTimes is how often a message comes back through a
// group's retry topic before it goes to the dead-letter queue.
const DefaultMaxReconsumeTimes = 16

// MaxDelayLevels bounds messageDelayLevel.
const MaxDelayLevels = 64

// Delay holds the delayed-message keys of [system] (docs/delay.md).
type Delay struct {
	Levels            []time.Duration // messageDelayLevel; nil = DefaultMessageDelayLevel
	MaxReconsumeTimes int             // maxReconsumeTimes; 0 = DefaultMaxReconsumeTimes
}

// DelayLevels returns the configured ladder (the default when unset).
func (d Delay) DelayLevels() []time.Duration {
	if len(d.Levels) > 0 {
		return d.Levels
	}
	l, _ := ParseDelayLevels(DefaultMessageDelayLevel)
	return l
}

// MaxReconsume returns maxReconsumeTimes (the default when unset).
func (d Delay) MaxReconsume() int {
	if d.MaxReconsumeTimes > 0 {
		return d.MaxReconsumeTimes
	}
	return DefaultMaxReconsumeTimes
}

// ParseDelayLevels parses a space-separated list of durations with a unit
// each: ms, s, m, h or d ("1s 5s 10s 30s 1m"). 1 to 64 levels, each between
// 1ms and 366 days.
func ParseDelayLevels(v string) ([]time.Duration, error) {
	fields := strings.Fields(v)
	if len(fields) == 0 || len(fields) > MaxDelayLevels {
		return nil, fmt.Errorf("want 1 to %d durations such as \"1s 5s 1m\", got %d", MaxDelayLevels, len(fields))
	}
	out := make([]time.Duration, 0, len(fields))
	for _, f := range fields {
		d, err := parseLevel(f)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

func parseLevel(f string) (time.Duration, error) {
	units := []struct {
		suffix string
		unit   time.Duration
	}{{"ms", time.Millisecond}, {"s", time.Second}, {"m", time.Minute}, {"h", time.Hour}, {"d", 24 * time.Hour}}
	for _, u := range units {
		num, ok := strings.CutSuffix(f, u.suffix)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n <= 0 || n > int64(366*24*time.Hour/u.unit) {
			break
		}
		return time.Duration(n) * u.unit, nil
	}
	return 0, fmt.Errorf("bad delay level %q: want a positive number with a unit ms, s, m, h or d, at most 366d", f)
}

// System topics: every name that starts with '%' is reserved for the broker.
const (
	ScheduleTopic = "%SCHEDULE%" // delayed messages waiting for their time (docs/delay.md)
	RetryPrefix   = "%RETRY%"    // %RETRY%<group>: messages a consumer gave back
	DLQPrefix     = "%DLQ%"      // %DLQ%<group>: dead letters
	// SchedulePartitions is the partition count of %SCHEDULE%: 0 holds
	// deliverAt messages, 1..64 the delay levels, 65 the delay service's
	// progress records.
	SchedulePartitions = MaxDelayLevels + 2
)

// systemTopic answers Topic for a name starting with '%': the broker's
// system topics are readable (get) but never accept a client put; other
// '%' names are not accepted.
func (c *Config) systemTopic(name string) (Topic, bool) {
	t := Topic{Name: name, Pattern: name, NumPartitions: 1, DeletePolicy: c.System.DeletePolicy,
		DeleteWhen: c.System.DeleteWhen, AcceptSubscribe: true, Stat: true}
	switch {
	case name == ScheduleTopic:
		t.NumPartitions = SchedulePartitions
	case name == "%TX_HALF%", name == "%TX_OP%": // the transaction log (broker/tx)
	case name == PopTopic: // broker-managed delivery state (broker/pop)
		t.NumPartitions = 2
	case strings.HasPrefix(name, RetryPrefix) && len(name) > len(RetryPrefix),
		strings.HasPrefix(name, DLQPrefix) && len(name) > len(DLQPrefix):
	default:
		return Topic{}, false
	}
	return t, true
}
