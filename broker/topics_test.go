package broker_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

// With a wildcard section ([topic=*]) the read-only commands take any
// name. They must not intern a topic per name (topics.go): that grew the
// broker-wide table without bound, copying the whole map at each insert.
// They still answer as for an empty topic, and the first put interns it.
func TestReadsOfUnwrittenTopicsDoNotGrowTopicTable(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"*": 1}})
	before := broker.TopicTableLen(b.Server)
	c := b.Dial()
	const n = 1000
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, "offset nosuch-%d g 0 5 %d\r\n", i, 3*i)
		fmt.Fprintf(&sb, "get nosuch-%d g 0 0 1024 %d\r\n", i, 3*i+1)
		fmt.Fprintf(&sb, "seek nosuch-%d 0 0 %d\r\n", i, 3*i+2)
	}
	c.Send(sb.String())
	for i := range n {
		// offset of an empty partition: 0; get: nothing there; seek: 0.
		if r := c.Reply(); r.Code != 200 || string(r.Body) != "0" {
			t.Fatalf("offset nosuch-%d: %d %q, want 200 0", i, r.Code, r.Body)
		}
		if r := c.Reply(); r.Code != 404 {
			t.Fatalf("get nosuch-%d: %d %q, want 404", i, r.Code, r.Body)
		}
		if r := c.Reply(); r.Code != 200 || string(r.Body) != "0" {
			t.Fatalf("seek nosuch-%d: %d %q, want 200 0", i, r.Code, r.Body)
		}
	}
	if grown := broker.TopicTableLen(b.Server) - before; grown != 0 {
		t.Fatalf("%d reads of topics never written interned %d topics", 3*n, grown)
	}

	c.Put("written", 0, "hello", 7)
	if grown := broker.TopicTableLen(b.Server) - before; grown != 1 {
		t.Fatalf("the first put interned %d topics, want 1", grown)
	}
	c.Send("offset written g 0 5 8\r\nget written g 0 0 1024 9\r\n")
	if r := c.Reply(); r.Code != 200 || string(r.Body) != "1" {
		t.Fatalf("offset written: %d %q, want 200 1 (the max)", r.Code, r.Body)
	}
	if r := c.Reply(); r.Kind != protocol.ReplyValue || len(brokertest.Records(t, r.Body)) != 1 {
		t.Fatalf("get written: %+v", r)
	}
}
