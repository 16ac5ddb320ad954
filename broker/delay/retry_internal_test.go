package delay

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

// The retry reason is URL-escaped text: one holding '&' or '=' (which
// passed the parser) was appended as is to the %SCHEDULE% record's
// properties, before realTopic and realPartition, and delivery followed
// the first realTopic, so a consumer could route any message into any
// topic, system topics included. Such a reason is refused; the same text
// escaped is kept and reads back as sent.
func TestRetryReasonCannotAddProperties(t *testing.T) {
	st, s := openService(t, nil)
	res, err := st.Append(&store.Message{Topic: "t", Data: []byte("m")})
	if err != nil {
		t.Fatal(err)
	}
	for _, reason := range []string{"x&realTopic=%25TX_OP%25&realPartition=0", "a=b", "a\nb", "a\x7f"} {
		if _, _, _, err := s.Retry("g", res.MsgID, 1, []byte(reason), nil); !errors.Is(err, ErrBadReason) {
			t.Fatalf("reason %q: %v, want ErrBadReason", reason, err)
		}
	}
	if n := st.MaxOffset(scheduleTopic, 1); n != 0 {
		t.Fatalf("refused retries stored %d records", n)
	}
	text := "x&realTopic=%25TX_OP%25&realPartition=0"
	if _, _, _, err := s.Retry("g", res.MsgID, 1, protocol.AppendEscaped(nil, text), nil); err != nil {
		t.Fatal(err)
	}
	if !waitTopic(st, RetryTopic("g")) {
		t.Fatal("not delivered to the retry topic")
	}
	if n := st.MaxOffset("%TX_OP%", 0); n != 0 {
		t.Fatalf("%d records delivered into %%TX_OP%%", n)
	}
	if rs := readAll(t, st, RetryTopic("g"), 0); len(rs) != 1 || protocol.Property(rs[0].Properties, PropReason) != text {
		t.Fatalf("retried records %+v", rs)
	}
}

// A long reason is cut at 512 bytes without leaving half an escape.
func TestRetryReasonCut(t *testing.T) {
	for _, c := range []struct {
		tail string
		n    int
	}{{"%20b", 512}, {"a%20", 510}, {"aa%20", 511}, {"aaa", 512}} {
		reason := append(bytes.Repeat([]byte{'a'}, 509), c.tail...)
		if got := cutReason(reason); len(got) != c.n {
			t.Errorf("...%s: cut to %d bytes, want %d", c.tail, len(got), c.n)
		}
	}
}

// A %SCHEDULE% record written by a broker that did not check reasons has
// two realTopic and realPartition pairs, the reason's first: delivery
// follows the broker's, the last.
func TestDeliverFollowsTheBrokersRoutingKeys(t *testing.T) {
	st, _ := openService(t, nil)
	props := "retryTopic=t&origMsgId=1&reason=x&realTopic=%25TX_OP%25&realPartition=0&realTopic=%25RETRY%25g&realPartition=0"
	if _, err := st.Append(&store.Message{Topic: scheduleTopic, Partition: 1, Data: []byte("m"),
		SysFlag: protocol.SysFlagDelayed | protocol.SysFlagRetry, Properties: []byte(props)}); err != nil {
		t.Fatal(err)
	}
	if !waitTopic(st, RetryTopic("g")) {
		t.Fatalf("not delivered to %s", RetryTopic("g"))
	}
	if n := st.MaxOffset("%TX_OP%", 0); n != 0 {
		t.Fatalf("%d records delivered into %%TX_OP%%", n)
	}
}

// A due record is delivered to a consumers' topic, or to partition 0 of a
// retry or dead-letter topic, and nowhere else: not into another system
// topic (forged %SCHEDULE% progress records, the transaction log), not
// into a partition the topic does not have. Such records are skipped.
func TestDeliverRefusesSystemTopicsAndMissingPartitions(t *testing.T) {
	st, s := openService(t, func(c *Config) {
		c.Partitions = func(topic string) (int, bool) { return 2, topic == "t" }
	})
	for _, dst := range []struct {
		topic string
		part  int
	}{{"%TX_OP%", 0}, {"%TX_HALF%", 0}, {"%SCHEDULE%", int(ProgressPartition)}, {"%RETRY%g", 1}, {"t", 2}, {"t", 1}} {
		m := store.Message{Topic: dst.topic, Partition: int32(dst.part), Data: []byte("forged")}
		if dst.topic == "t" && dst.part == 1 {
			m.Data = []byte("last")
		}
		sm, _ := ScheduleMessage(&m, Plan{Partition: 1}, nil)
		if _, err := st.Append(&sm); err != nil {
			t.Fatal(err)
		}
	}
	// Level 1 delivers in order: once "last" is in t-1, every record
	// before it was handled.
	for deadline := time.Now().Add(3 * time.Second); st.MaxOffset("t", 1) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the valid record was not delivered")
		}
	}
	for _, c := range []struct {
		topic string
		part  int32
	}{{"%TX_OP%", 0}, {"%TX_HALF%", 0}, {"%RETRY%g", 1}, {"%RETRY%g", 0}, {"t", 2}} {
		if n := st.MaxOffset(c.topic, c.part); n != 0 {
			t.Errorf("%d records delivered into %s-%d", n, c.topic, c.part)
		}
	}
	for _, r := range readAll(t, st, scheduleTopic, ProgressPartition) {
		if string(r.Data) == "forged" {
			t.Errorf("a record was delivered into the progress partition: %q", r.Properties)
		}
	}
	if n := s.delivered.Load(); n != 1 {
		t.Errorf("%d delivered, want 1", n)
	}
}

// Retry accepted any record id of the log: a %TX_HALF% record (an
// uncommitted, possibly rolled-back half message, invisible by contract)
// was copied into %RETRY%<group>, where the group's consumers read it. A
// record of a system topic other than a retry or dead-letter topic, or a
// half message anywhere, is not found; retry and dead-letter records are
// given back as before.
func TestRetryRefusesHalfMessage(t *testing.T) {
	st, s := openService(t, nil)
	for _, m := range []store.Message{
		{Topic: "%TX_HALF%", Data: []byte("rolled back"), SysFlag: protocol.SysFlagTxPrepared, Properties: []byte("rt=t&rp=0&pg=pg")},
		{Topic: "%TX_OP%", Data: []byte("op")},
		{Topic: "%RESENT%g", Data: []byte("v=1&dlq=1&new=2")},
		{Topic: "%TRACE%", Data: []byte("trace")},
		{Topic: "t", Data: []byte("half"), SysFlag: protocol.SysFlagTxPrepared},
	} {
		res, err := st.Append(&m)
		if err != nil {
			t.Fatal(err)
		}
		for _, level := range []int{1, -1} {
			if _, _, _, err := s.Retry("g", res.MsgID, level, nil, nil); !errors.Is(err, ErrNotFound) {
				t.Fatalf("retry (level %d) of a %s record: %v, want ErrNotFound", level, m.Topic, err)
			}
		}
	}
	if st.MaxOffset(scheduleTopic, 1) != 0 || st.MaxOffset(DLQTopic("g"), 0) != 0 {
		t.Fatal("a refused record was stored again")
	}
	for _, topic := range []string{RetryTopic("g"), DLQTopic("g")} {
		res, err := st.Append(&store.Message{Topic: topic, Data: []byte("m"), Properties: []byte("retryTopic=t")})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := s.Retry("g", res.MsgID, -1, nil, nil); err != nil {
			t.Fatalf("retry of a %s record: %v", topic, err)
		}
	}
}
