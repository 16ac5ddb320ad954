package zkmeta_test

import (
	"errors"
	"reflect"
	"regexp"
	"testing"

	"github.com/metaqgo/metaq/zkmeta"
)

func TestParseConnectString(t *testing.T) {
	for _, tc := range []struct {
		in      string
		servers []string
		chroot  string
		bad     bool
	}{
		{in: "127.0.0.1:2181", servers: []string{"127.0.0.1:2181"}},
		{in: "a:1,b:2/meta-test", servers: []string{"a:1", "b:2"}, chroot: "/meta-test"},
		{in: " a , b:3 /x/y/ ", servers: []string{"a:2181", "b:3"}, chroot: "/x/y"},
		{in: "a:1/", servers: []string{"a:1"}},
		{in: "[::1]:2182/c", servers: []string{"[::1]:2182"}, chroot: "/c"},
		{in: "::1", servers: []string{"[::1]:2181"}},
		{in: "", bad: true},
		{in: "/chroot", bad: true},
		{in: "a:1/x//y", bad: true},
		{in: "a:1/x/../y", bad: true},
	} {
		servers, chroot, err := zkmeta.ParseConnectString(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("%q: no error (servers %v chroot %q)", tc.in, servers, chroot)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(servers, tc.servers) || chroot != tc.chroot {
			t.Errorf("%q: got %v %q %v, want %v %q", tc.in, servers, chroot, err, tc.servers, tc.chroot)
		}
	}
}

func TestPaths(t *testing.T) {
	for root, want := range map[string]string{"": "/meta", "meta": "/meta", "/meta/": "/meta", "/": "/", "/a/b": "/a/b"} {
		if got := zkmeta.NewPaths(root).Root(); got != want {
			t.Errorf("NewPaths(%q).Root() = %q, want %q", root, got, want)
		}
	}
	p := zkmeta.NewPaths("")
	part := zkmeta.Partition{BrokerID: 3, Partition: 7}
	for got, want := range map[string]string{
		p.BrokerIDs():                                 "/meta/brokers/ids",
		p.BrokerMaster(1):                             "/meta/brokers/ids/1/master",
		p.BrokerSlave(1, 0):                           "/meta/brokers/ids/1/slave0",
		p.BrokerNode(2, -1):                           "/meta/brokers/ids/2/master",
		p.BrokerNode(2, 3):                            "/meta/brokers/ids/2/slave3",
		p.BrokerTopicNode("t", 1, -1):                 "/meta/brokers/topics/t/1-m",
		p.BrokerTopicNode("t", 1, 2):                  "/meta/brokers/topics/t/1-s2",
		p.TopicPubNode("t", 1, -1):                    "/meta/brokers/topics-pub/t/1-m",
		p.TopicSubNode("t", 1, 0):                     "/meta/brokers/topics-sub/t/1-s0",
		p.ConsumerNode("g", "host-1-2-3"):             "/meta/consumers/g/ids/g_host-1-2-3",
		p.Owner("g", "t", part):                       "/meta/consumers/g/owners/t/3-7",
		p.Offset("g", "t", part):                      "/meta/consumers/g/offsets/t/3-7",
		p.GroupOffsets("g"):                           "/meta/consumers/g/offsets",
		zkmeta.NewPaths("/").BrokerMaster(1):          "/brokers/ids/1/master",
		zkmeta.NewPaths("x/y").Offset("g", "t", part): "/x/y/consumers/g/offsets/t/3-7",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

func TestNodeFormats(t *testing.T) {
	if got := string(zkmeta.TopicBrokerJSON(4, zkmeta.BrokerRole(1, -1))); got != `{"numParts":4,"broker":"1-m"}` {
		t.Errorf("TopicBrokerJSON = %s", got)
	}
	if got := string(zkmeta.TopicBrokerJSON(12, zkmeta.BrokerRole(10, 2))); got != `{"numParts":12,"broker":"10-s2"}` {
		t.Errorf("TopicBrokerJSON = %s", got)
	}
	for in, want := range map[string]int{`{"numParts":4,"broker":"1-m"}`: 4, `{ "broker": "1-m", "numParts": 9 }`: 9, "3": 3, " 5\n": 5} {
		n, _, err := zkmeta.ParseTopicBroker([]byte(in))
		if err != nil || n != want {
			t.Errorf("ParseTopicBroker(%q) = %d, %v; want %d", in, n, err, want)
		}
	}
	for _, in := range []string{"", "x", "-1", `{"broker":"1-m"}`, `{"numParts":-2}`} {
		if _, _, err := zkmeta.ParseTopicBroker([]byte(in)); err == nil {
			t.Errorf("ParseTopicBroker(%q): no error", in)
		}
	}

	if got := zkmeta.BrokerURI("127.0.0.1", 8123); got != "meta://127.0.0.1:8123" {
		t.Errorf("BrokerURI = %s", got)
	}
	if got := zkmeta.BrokerURI("::1", 8123); got != "meta://[::1]:8123" {
		t.Errorf("BrokerURI = %s", got)
	}
	for in, want := range map[string]string{"meta://h:1": "h:1", "meta://10.0.0.1:8123?slaveId=0": "10.0.0.1:8123", "meta://[::1]:9/": "[::1]:9"} {
		if got, err := zkmeta.ParseBrokerURI(in); err != nil || got != want {
			t.Errorf("ParseBrokerURI(%q) = %q, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "h:1", "meta://h", "meta://:1", "meta://h:0", "http://h:1"} {
		if _, err := zkmeta.ParseBrokerURI(in); err == nil {
			t.Errorf("ParseBrokerURI(%q): no error", in)
		}
	}

	for in, want := range map[string][2]int{"1-m": {1, -1}, "12-s0": {12, 0}, "3-s11": {3, 11}} {
		id, s, err := zkmeta.ParseBrokerRole(in)
		if err != nil || id != want[0] || s != want[1] {
			t.Errorf("ParseBrokerRole(%q) = %d %d %v", in, id, s, err)
		}
		if zkmeta.BrokerRole(id, s) != in {
			t.Errorf("BrokerRole round trip of %q", in)
		}
	}
	for _, in := range []string{"1", "1-x", "a-m", "-1-m", "1-s", "1-s-1"} {
		if _, _, err := zkmeta.ParseBrokerRole(in); err == nil {
			t.Errorf("ParseBrokerRole(%q): no error", in)
		}
	}

	for in, want := range map[string]zkmeta.Offset{
		"123-456":           {MsgID: 123, Offset: 456},
		"-1-5":              {MsgID: -1, Offset: 5},
		"789":               {MsgID: -1, Offset: 789}, // MetaQ before 1.4: plain offset
		" 42\n":             {MsgID: -1, Offset: 42},
		"7--1":              {MsgID: 7, Offset: -1},
		"0-0":               {MsgID: 0, Offset: 0},
		"-3":                {MsgID: -1, Offset: -3},
		"281474976710656-3": {MsgID: 1 << 48, Offset: 3},
	} {
		got, err := zkmeta.ParseOffset([]byte(in))
		if err != nil || got != want {
			t.Errorf("ParseOffset(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "1-", "-", "1-2-3", "a-1"} {
		if _, err := zkmeta.ParseOffset([]byte(in)); err == nil {
			t.Errorf("ParseOffset(%q): no error", in)
		}
	}
	if got := (zkmeta.Offset{MsgID: -1, Offset: 9}).String(); got != "-1-9" {
		t.Errorf("Offset.String = %s", got)
	}

	if p, err := zkmeta.ParsePartition("2-15"); err != nil || p != (zkmeta.Partition{BrokerID: 2, Partition: 15}) || p.String() != "2-15" {
		t.Errorf("ParsePartition: %+v %v", p, err)
	}
	for _, in := range []string{"2", "2-", "-1-2", "a-1", "1-b"} {
		if _, err := zkmeta.ParsePartition(in); err == nil {
			t.Errorf("ParsePartition(%q): no error", in)
		}
	}

	if got := zkmeta.ParseTopics([]byte("a,b, c,,")); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Errorf("ParseTopics = %q", got)
	}
	if got := zkmeta.ParseTopics([]byte("  ")); got != nil {
		t.Errorf("ParseTopics(blank) = %q", got)
	}
	if got := string(zkmeta.FormatTopics([]string{"a", "b"})); got != "a,b" {
		t.Errorf("FormatTopics = %q", got)
	}

	for _, ok := range []string{"orders", "%RETRY%billing", "a.b-c_d", "x"} {
		if err := zkmeta.ValidateName("topic", ok); err != nil {
			t.Errorf("ValidateName(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "a b", string(make([]byte, 256))} {
		if err := zkmeta.ValidateName("topic", bad); !errors.Is(err, zkmeta.ErrBadName) {
			t.Errorf("ValidateName(%q) = %v", bad, err)
		}
	}
}

func TestNewConsumerID(t *testing.T) {
	a, b := zkmeta.NewConsumerID(), zkmeta.NewConsumerID()
	re := regexp.MustCompile(`^[A-Za-z0-9.-]+-\d+-\d{13}-\d+$`)
	if !re.MatchString(a) || !re.MatchString(b) || a == b {
		t.Fatalf("consumer ids %q %q", a, b)
	}
}
