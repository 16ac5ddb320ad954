package trace

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Column texts of a timeline row (metaq trace and the dashboard's trace
// page show the same ones); "-" when empty.

// Where is the topic, <broker>-<partition>@<offset> and the copy's record.
func (e *Event) Where() string {
	s := e.Topic
	if e.Broker >= 0 && e.Partition >= 0 {
		s += fmt.Sprintf(" %d-%d", e.Broker, e.Partition)
	}
	if e.Offset >= 0 {
		s += "@" + strconv.FormatInt(e.Offset, 10)
	}
	if e.RecordID != 0 {
		s += " (record " + strconv.FormatInt(e.RecordID, 10) + ")"
	}
	return dash(s)
}

// Who is the group and the consumer (or the host).
func (e *Event) Who() string {
	var parts []string
	if e.Group != "" {
		parts = append(parts, e.Group)
	}
	if e.Client != "" {
		parts = append(parts, e.Client)
	} else if e.Host != "" {
		parts = append(parts, e.Host)
	}
	return dash(strings.Join(parts, "/"))
}

// AttemptText is the attempt and the reconsume count.
func (e *Event) AttemptText() string {
	if e.Attempt == 0 && e.Reconsume == 0 {
		return "-"
	}
	s := strconv.Itoa(max(e.Attempt, 1))
	if e.Reconsume > 0 {
		s += " (reconsume " + strconv.Itoa(e.Reconsume) + ")"
	}
	return s
}

// CostText is the cost as a duration.
func (e *Event) CostText() string {
	if e.Cost <= 0 {
		return "-"
	}
	return (time.Duration(e.Cost) * time.Microsecond).String()
}

// Result is ok, failed: <why>, or - (a begin event).
func (e *Event) Result() string {
	switch {
	case e.Type == ConsumeBegin:
		return "-"
	case e.Err != "":
		return "failed: " + e.Err
	case e.OK:
		return "ok"
	}
	return "-"
}

// DetailText is Detail or "-".
func (e *Event) DetailText() string { return dash(e.Detail) }

// TimeText is the event's local time with milliseconds, and its distance
// from t0 (the first event's time) when t0 is not 0.
func (e *Event) TimeText(t0 int64) string {
	s := time.UnixMilli(e.Time).Format("15:04:05.000")
	if t0 != 0 {
		s += " +" + strconv.FormatInt(e.Time-t0, 10) + "ms"
	}
	return s
}

func dash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}
