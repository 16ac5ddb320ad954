package delay

import (
	"errors"
	"testing"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

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
