package protocol

import (
	"bytes"
	"testing"
)

func TestParseTxCommands(t *testing.T) {
	for _, tc := range []struct {
		in     string
		op     Op
		bad    bool
		msgID  int64
		key    string
		group  string
		opaque int32
	}{
		{in: "txend 281474976710858 commit 5\r\n", op: OpTxEnd, msgID: 281474976710858, key: "commit", opaque: 5},
		{in: "TXEND 1 ROLLBACK -7\r\n", op: OpTxEnd, msgID: 1, key: "ROLLBACK", opaque: -7},
		{in: "txend 1 unknown 8\r\n", op: OpTxEnd, msgID: 1, key: "unknown", opaque: 8},
		{in: "txend 1 maybe 9\r\n", op: OpTxEnd, bad: true, opaque: 9},
		{in: "txend -1 commit 9\r\n", op: OpTxEnd, bad: true, opaque: 9},
		{in: "txend 1 commit\r\n", op: OpTxEnd, bad: true},
		{in: "producer order-service 3\r\n", op: OpProducer, group: "order-service", opaque: 3},
		{in: "producer a/b 3\r\n", op: OpProducer, bad: true, opaque: 3},
		{in: "producer 3\r\n", op: OpProducer, bad: true, opaque: 3},
	} {
		var p Parser
		n := 0
		err := p.Parse([]byte(tc.in), func(c *Command) error {
			n++
			if c.Op != tc.op || (c.Err != nil) != tc.bad || (tc.opaque != 0 && c.Opaque != tc.opaque) {
				t.Errorf("%q: op %v err %v opaque %d", tc.in, c.Op, c.Err, c.Opaque)
			}
			if !tc.bad && (c.MsgID != tc.msgID || string(c.Key) != tc.key || string(c.Group) != tc.group) {
				t.Errorf("%q: msgId %d key %q group %q", tc.in, c.MsgID, c.Key, c.Group)
			}
			return nil
		})
		if err != nil || n != 1 {
			t.Errorf("%q: %d commands, %v", tc.in, n, err)
		}
	}
}

func TestReplyReaderCheck(t *testing.T) {
	var b []byte
	b = AppendResultString(b, 200, "1 0 -1", 4)
	b = AppendCheck(b, 281474976710858, 77)
	b = AppendResultString(b, 200, "", 5)
	rr := NewReplyReader(bytes.NewReader(b), 0)
	want := []Reply{{ReplyResult, 200, 4, []byte("1 0 -1")}, {ReplyCheck, 200, 77, []byte("281474976710858")}, {ReplyResult, 200, 5, nil}}
	for i, w := range want {
		r, err := rr.Next()
		if err != nil || r.Kind != w.Kind || r.Opaque != w.Opaque || !bytes.Equal(r.Body, w.Body) {
			t.Fatalf("reply %d: %+v %v, want %+v", i, r, err, w)
		}
	}
	for _, bad := range []string{"check x 1\r\n", "check 1 x\r\n", "check -5 1\r\n"} {
		if _, err := NewReplyReader(bytes.NewReader([]byte(bad)), 0).Next(); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
