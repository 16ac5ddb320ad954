package client

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// The five-line experience, and every message field round-tripping: tag,
// keys, attribute, properties; tag subscription filtered on the broker and
// re-checked; offsets committed up to the end, filtered messages included.
func TestSendAndConsume(t *testing.T) {
	cl := newCluster(t, map[string]int{"orders": 4}, 1)
	ctx := ctxT(t, 30*time.Second)

	p, err := NewProducer(Config{ZKConnect: cl.zk, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	res, err := p.Send(ctx, &Message{Topic: "orders", Body: []byte("first"), Tag: "paid", Keys: []string{"o-42"}})
	if err != nil {
		t.Fatal(err)
	}
	if bid, _ := protocol.SplitMsgID(res.MsgID); bid != 1 || res.Partition.BrokerID != 1 || res.Offset != 0 {
		t.Fatalf("send result %+v", res)
	}
	tags := []string{"paid", "refunded", "shipped"}
	const n = 60
	for i := 1; i < n; i++ {
		m := &Message{Topic: "orders", Body: []byte(fmt.Sprintf("body-%d", i)), Tag: tags[i%3],
			Keys: []string{fmt.Sprintf("o-%d", i), "customer 7"[:8] + "7"}}
		if i%5 == 0 {
			m.Attribute = "attr-" + fmt.Sprint(i)
			m.Properties = map[string]string{"trace": "t=1&x", "é": "ü"}
		}
		if _, err := p.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}

	col := newCollector()
	cfg := cl.config()
	cfg.Consumer.MaxWait = 300 * time.Millisecond
	c, err := NewConsumer(cfg, "billing")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe("orders", "paid||refunded", col.handler); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	want := 0
	for i := 0; i < n; i++ {
		if i%3 != 2 {
			want++
		}
	}
	col.waitDistinct(t, want, 15*time.Second)
	// Committed offsets reach every partition's end (filtered tails too).
	zktest.Eventually(t, 10*time.Second, func() bool {
		sum := int64(0)
		for _, o := range cl.committed("billing", "orders") {
			sum += o.Offset
		}
		return sum == n
	}, "offsets committed to the end: %v", cl.committed("billing", "orders"))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	got := col.snapshot()
	if len(got) != want {
		t.Fatalf("got %d deliveries, want %d", len(got), want)
	}
	byPart := map[Partition][]int64{}
	for _, m := range got {
		if m.Tag == "shipped" {
			t.Fatalf("filtered tag delivered: %v", m)
		}
		byPart[m.Partition] = append(byPart[m.Partition], m.Offset)
		var i int
		if string(m.Body) == "first" {
			i = 0
		} else if _, err := fmt.Sscanf(string(m.Body), "body-%d", &i); err != nil {
			t.Fatalf("body %q", m.Body)
		}
		if m.Tag != tags[i%3] && i != 0 {
			t.Fatalf("message %d: tag %q", i, m.Tag)
		}
		if i > 0 && (len(m.Keys) != 2 || m.Keys[0] != fmt.Sprintf("o-%d", i) || m.Keys[1] != "customer7") {
			t.Fatalf("message %d: keys %q", i, m.Keys)
		}
		if i%5 == 0 && i > 0 {
			if m.Attribute != "attr-"+fmt.Sprint(i) || m.Properties["trace"] != "t=1&x" || m.Properties["é"] != "ü" {
				t.Fatalf("message %d: attribute %q properties %v", i, m.Attribute, m.Properties)
			}
		} else if m.Attribute != "" || m.Properties != nil {
			t.Fatalf("message %d: attribute %q properties %v", i, m.Attribute, m.Properties)
		}
		if m.Topic != "orders" || m.MsgID <= 0 || m.StoreTime.IsZero() || time.Since(m.StoreTime) > time.Minute {
			t.Fatalf("message %d: %+v", i, m)
		}
	}
	for part, offs := range byPart {
		if !sort.SliceIsSorted(offs, func(i, j int) bool { return offs[i] < offs[j] }) {
			t.Fatalf("partition %s out of order: %v", part, offs)
		}
	}
}

// Producer validation and ErrNoPartitions.
func TestProducerErrors(t *testing.T) {
	cl := newCluster(t, map[string]int{"orders": 2}, 1)
	p := cl.producer()
	ctx := ctxT(t, 20*time.Second)
	if _, err := p.Send(ctx, &Message{Topic: "bad/topic", Body: []byte("x")}); !errors.Is(err, zkmeta.ErrBadName) {
		t.Fatalf("bad topic: %v", err)
	}
	if _, err := p.Send(ctx, &Message{Topic: "orders", Body: []byte("x"), Keys: []string{"a b"}}); err == nil {
		t.Fatal("key with a space accepted")
	}
	if _, err := p.Send(ctx, &Message{Topic: "orders", Body: make([]byte, 5<<20)}); err == nil {
		t.Fatal("oversized message accepted")
	}
	if _, err := p.Send(ctx, &Message{Topic: "nosuchtopic", Body: []byte("x")}); !errors.Is(err, ErrNoPartitions) {
		t.Fatalf("unknown topic: %v", err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	p.SendAsync(ctx, &Message{Topic: "nosuchtopic", Body: []byte("x")}, func(_ SendResult, err error) {
		defer wg.Done()
		if !errors.Is(err, ErrNoPartitions) {
			t.Errorf("async unknown topic: %v", err)
		}
	})
	wg.Wait()
	p.Close()
	if _, err := p.Send(ctx, &Message{Topic: "orders", Body: []byte("x")}); !errors.Is(err, ErrClosed) {
		t.Fatalf("send after close: %v", err)
	}
}

// HashByKey keeps a key on one partition; SendAsync delivers every callback.
func TestHashByKeyAndAsync(t *testing.T) {
	cl := newCluster(t, map[string]int{"orders": 4}, 1, 2)
	p := cl.producer(func(c *Config) { c.Producer.Selector = HashByKey() })
	ctx := ctxT(t, 30*time.Second)
	const n = 2000
	var mu sync.Mutex
	partOf := map[string]Partition{}
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("k%d", i%37)
		wg.Add(1)
		p.SendAsync(ctx, &Message{Topic: "orders", Body: []byte("v"), Keys: []string{key}}, func(r SendResult, err error) {
			defer wg.Done()
			if err != nil {
				failed.Add(1)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if old, ok := partOf[key]; ok && old != r.Partition {
				t.Errorf("key %s on %s and %s", key, old, r.Partition)
			}
			partOf[key] = r.Partition
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d async sends failed", failed.Load())
	}
	used := map[Partition]bool{}
	for _, p := range partOf {
		used[p] = true
	}
	if len(used) < 4 {
		t.Fatalf("37 keys used only %d of 8 partitions", len(used))
	}
}

func TestAssign(t *testing.T) {
	var parts []Partition
	for b := 2; b >= 1; b-- {
		for i := 3; i >= 0; i-- {
			parts = append(parts, Partition{BrokerID: b, Partition: i})
		}
	}
	cs := []string{"g_c", "g_a", "g_b"}
	got := map[string]string{}
	seen := map[Partition]bool{}
	for _, c := range cs {
		var s []string
		for _, p := range Assign(parts, cs, c) {
			s = append(s, p.String())
			if seen[p] {
				t.Fatalf("%s assigned twice", p)
			}
			seen[p] = true
		}
		got[c] = strings.Join(s, ",")
	}
	want := map[string]string{"g_a": "1-0,1-1,1-2", "g_b": "1-3,2-0,2-1", "g_c": "2-2,2-3"}
	for c, w := range want {
		if got[c] != w {
			t.Fatalf("%s got %s want %s", c, got[c], w)
		}
	}
	if Assign(parts, cs, "g_x") != nil || Assign(nil, cs, "g_a") != nil {
		t.Fatal("assignment for a stranger or no partitions")
	}
	if a := Assign(parts[:2], cs, "g_c"); len(a) != 0 {
		t.Fatalf("more consumers than partitions: %v", a)
	}
}

func TestPropertiesEncoding(t *testing.T) {
	m := &Message{Tag: "a b&c", Keys: []string{"k1", "ké"}, DelayLevel: 3, Properties: map[string]string{"x y": "1=2", "tag": "ignored"}}
	props := appendProps(nil, m)
	if strings.ContainsAny(string(props), " \n\r") {
		t.Fatalf("unescaped: %q", props)
	}
	if got := protocol.Property(props, "tag"); got != "a b&c" {
		t.Fatalf("tag %q from %q", got, props)
	}
	if got := protocol.Keys(props); len(got) != 2 || got[1] != "ké" {
		t.Fatalf("keys %q", got)
	}
	if protocol.PropsTagHash(props) != protocol.TagHashString("a b&c") {
		t.Fatal("tag hash differs from the subscription's")
	}
	var d decoder
	var out Message
	d.decodeProps(&out, props)
	if out.Tag != m.Tag || len(out.Keys) != 2 || out.DelayLevel != 3 || out.Properties["x y"] != "1=2" || len(out.Properties) != 1 {
		t.Fatalf("decoded %+v from %q", out, props)
	}
}

func TestTracker(t *testing.T) {
	var tr tracker
	tr.init(Offset{MsgID: -1, Offset: 10})
	s10 := tr.push(10, 100)
	s11 := tr.push(11, 110)
	s13 := tr.push(13, 130) // 12 filtered by the broker
	if o := tr.committable(); o.Offset != 10 || o.MsgID != -1 {
		t.Fatalf("%+v", o)
	}
	tr.finish(s11)
	tr.finish(s13)
	if o := tr.committable(); o.Offset != 10 {
		t.Fatalf("passed an unfinished message: %+v", o)
	}
	tr.finish(s10)
	if o := tr.committable(); o.Offset != 14 || o.MsgID != 130 {
		t.Fatalf("%+v", o)
	}
	tr.skip(20)
	if o := tr.committable(); o.Offset != 20 {
		t.Fatalf("%+v", o)
	}
	s := tr.push(20, 200)
	tr.skip(25) // a batch end while 20 is in flight
	if o := tr.committable(); o.Offset != 20 {
		t.Fatalf("%+v", o)
	}
	tr.finish(s)
	if o := tr.committable(); o.Offset != 25 || o.MsgID != 200 {
		t.Fatalf("%+v", o)
	}
	// Many in flight, finished in reverse.
	var seqs []uint64
	for i := int64(0); i < 3000; i++ {
		seqs = append(seqs, tr.push(25+i, i))
	}
	for i := len(seqs) - 1; i > 0; i-- {
		tr.finish(seqs[i])
	}
	if o := tr.committable(); o.Offset != 25 {
		t.Fatalf("%+v", o)
	}
	tr.finish(seqs[0])
	if o := tr.committable(); o.Offset != 3025 {
		t.Fatalf("%+v", o)
	}
}

func TestBackoffDelay(t *testing.T) {
	b := DefaultRetryPolicy()
	var got []time.Duration
	for a := 1; a <= 12; a++ {
		got = append(got, b.OnFailure(context.Background(), nil, a, errors.New("x")).Delay)
	}
	if got[0] != 100*time.Millisecond || got[1] != 200*time.Millisecond || got[2] != 400*time.Millisecond || got[11] != 30*time.Second {
		t.Fatalf("%v", got)
	}
}

func TestSubscribeTags(t *testing.T) {
	c, err := NewConsumer(Config{ZKConnect: "127.0.0.1:1", ZKConnectionTimeout: 300 * time.Millisecond, Logger: testLogger()}, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := func(context.Context, *Message) error { return nil }
	for _, tc := range []struct{ topic, expr, get string }{
		{"t1", "*", ""}, {"t2", "", ""}, {"t3", " paid || refunded ", "paid||refunded"}, {"t4", "a b||c", ""}, {"t5", "x||*", ""},
	} {
		if err := c.Subscribe(tc.topic, tc.expr, h); err != nil {
			t.Fatal(err)
		}
		if got := c.subs[tc.topic].getTags; got != tc.get {
			t.Fatalf("%q: get tags %q, want %q", tc.expr, got, tc.get)
		}
	}
	if c.subs["t4"].filter.MatchTag("a") || !c.subs["t4"].filter.MatchTag("a b") {
		t.Fatal("client-side filter of a tag with a space")
	}
	if err := c.Subscribe("t1", "*", h); err == nil {
		t.Fatal("subscribed twice")
	}
	if err := c.Subscribe("t6", "a\nb", h); err == nil {
		t.Fatal("control character accepted")
	}
	if err := c.Start(context.Background()); err == nil || c.Subscribe("t7", "*", h) != ErrStarted {
		// Start fails (no ZooKeeper at 127.0.0.1:1) but counts as started.
		t.Fatalf("start without ZooKeeper: %v", err)
	}
}
