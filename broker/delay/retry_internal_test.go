package delay

import (
	"bytes"
	"errors"
	"testing"

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
