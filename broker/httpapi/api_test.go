package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/broker/httpapi"
	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// clusterFixture is a real broker registered in a real ZooKeeper, with its
// HTTP side, 20 messages in topic "orders" (one with key order-7 and a JSON
// body) and group "billing" having committed offset 5 on partition 0 and
// nothing on partition 1.
type clusterFixture struct {
	zk     string
	b      *brokertest.Broker
	hs     *httpapi.Server
	zc     *zkmeta.Client
	keyed  client.SendResult
	counts map[int]int64 // messages per partition
}

const fixtureToken = "s3cret"

func newClusterFixture(t *testing.T) *clusterFixture {
	t.Helper()
	f := &clusterFixture{zk: zktest.Server(t), counts: map[int]int64{}}
	f.b = brokertest.RunBroker(t, brokertest.Options{ZK: f.zk, BrokerID: 0, Topics: map[string]int{"orders": 2}})
	f.hs = runHTTP(t, f.b, nil)
	zc, err := zkmeta.Connect(context.Background(), zkmeta.Config{ConnectString: f.zk, Root: "/meta"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(zc.Close)
	f.zc = zc
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitFor(t, "orders registered in ZooKeeper", func() bool {
		tp, err := zc.Partitions(ctx, "orders", zkmeta.Publish)
		return err == nil && len(tp.Partitions) == 2
	})
	p, err := client.NewProducer(client.Config{ZKConnect: f.zk, ZKRoot: "/meta"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := 0; i < 20; i++ {
		m := &client.Message{Topic: "orders", Body: []byte(fmt.Sprintf("order number %d", i))}
		if i == 7 {
			m.Keys = []string{"order-7"}
			m.Tag = "paid"
			m.Body = []byte(`{"order":7,"amount":12.5}`)
		}
		r, err := p.Send(ctx, m)
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if i == 7 {
			f.keyed = r
		}
		f.counts[r.Partition.Partition]++
	}
	if err := zc.CommitOffset(ctx, "billing", "orders", zkmeta.Partition{BrokerID: 0, Partition: 0}, zkmeta.Offset{MsgID: -1, Offset: 5}); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *clusterFixture) wantLag() int64 { return f.counts[0] - 5 + f.counts[1] }

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if v != nil && resp.StatusCode == 200 {
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("%s: %v\n%s", url, err, body)
		}
	}
	return resp.StatusCode
}

func postJSON(t *testing.T, url, token string, v any) (int, string) {
	t.Helper()
	b, _ := json.Marshal(v)
	req, _ := http.NewRequest("POST", url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestAPI(t *testing.T) {
	f := newClusterFixture(t)
	u := f.hs.URL() + "/api/v1"

	var cv httpapi.ClusterView
	if st := getJSON(t, u+"/cluster", &cv); st != 200 || len(cv.Brokers) != 1 || cv.Brokers[0].Addr != f.b.Addr ||
		cv.Brokers[0].Version == "" || cv.Brokers[0].DiskTotal == 0 {
		t.Fatalf("cluster: %d %+v", st, cv)
	}

	var topics []httpapi.TopicSummary
	waitFor(t, "topic orders with 20 messages", func() bool {
		getJSON(t, u+"/topics", &topics)
		return len(topics) == 1 && topics[0].Topic == "orders" && topics[0].Messages == 20 && topics[0].Partitions == 2
	})

	var tv httpapi.TopicView
	if st := getJSON(t, u+"/topics/orders", &tv); st != 200 || len(tv.PartitionList) != 2 || len(tv.Groups) != 1 ||
		tv.Groups[0].Group != "billing" || tv.Groups[0].Lag != f.wantLag() {
		t.Fatalf("topic: %d %+v (want lag %d)", st, tv, f.wantLag())
	}
	if st := getJSON(t, u+"/topics/nope", nil); st != 404 {
		t.Errorf("unknown topic: %d", st)
	}

	var gv httpapi.GroupView
	if st := getJSON(t, u+"/groups/billing", &gv); st != 200 || gv.Lag != f.wantLag() || len(gv.Partitions) != 2 ||
		gv.Partitions[0].Committed == nil || *gv.Partitions[0].Committed != 5 || gv.Partitions[0].Lag != f.counts[0]-5 {
		t.Fatalf("group: %d %+v", st, gv)
	}
	if st := getJSON(t, u+"/groups/ghost", nil); st != 404 {
		t.Errorf("unknown group: %d", st)
	}
	var gs []httpapi.GroupSummary
	if getJSON(t, u+"/groups", &gs); len(gs) != 1 || gs[0].Lag != f.wantLag() || gs[0].Members != 0 {
		t.Fatalf("groups: %+v", gs)
	}

	var l httpapi.Lookup
	if st := getJSON(t, u+fmt.Sprintf("/messages?id=%d", f.keyed.MsgID), &l); st != 200 || len(l.Messages) != 1 ||
		l.Messages[0].Tag != "paid" || !strings.Contains(l.Messages[0].JSON, `"amount": 12.5`) || l.Messages[0].Hex == "" {
		t.Fatalf("lookup by id: %d %+v", st, l)
	}
	if getJSON(t, u+"/messages?topic=orders&key=order-7", &l); len(l.Messages) != 1 || l.Messages[0].ID != fmt.Sprint(f.keyed.MsgID) {
		t.Fatalf("lookup by key: %+v", l)
	}
	if getJSON(t, u+"/messages?topic=orders&time=-1h&count=50", &l); len(l.Messages) != 20 {
		t.Fatalf("lookup by time: %d messages %v", len(l.Messages), l.Errors)
	}
	if getJSON(t, u+"/messages?topic=orders&time=-1h&partition=0-1&count=3", &l); len(l.Messages) != 3 || l.Messages[0].Partition != "0-1" {
		t.Fatalf("lookup by time in 0-1: %+v", l)
	}
	if st := getJSON(t, u+"/messages?id=12x", nil); st != 400 {
		t.Errorf("bad id: %d", st)
	}

	// The reset is guarded by the token.
	req := httpapi.ResetRequest{Topic: "orders", To: "latest"}
	if st, body := postJSON(t, u+"/groups/billing/reset", "", req); st != 401 {
		t.Fatalf("reset without token: %d %s", st, body)
	}
	if st, body := postJSON(t, u+"/groups/billing/reset", "wrong", req); st != 401 {
		t.Fatalf("reset with a wrong token: %d %s", st, body)
	}
	if st, body := postJSON(t, u+"/groups/billing/reset", fixtureToken, req); st != 200 {
		t.Fatalf("reset: %d %s", st, body)
	}
	if getJSON(t, u+"/groups/billing", &gv); gv.Lag != 0 {
		t.Fatalf("lag after skipping to latest: %+v", gv)
	}
	if st, body := postJSON(t, u+"/groups/billing/reset", fixtureToken, httpapi.ResetRequest{Topic: "orders", To: "3", Partition: "0-0"}); st != 200 {
		t.Fatalf("reset to offset: %d %s", st, body)
	}
	if getJSON(t, u+"/groups/billing", &gv); gv.Lag != f.counts[0]-3 {
		t.Fatalf("lag after reset to 3: %+v", gv)
	}
	// A live consumer blocks a reset unless forced.
	node, err := f.zc.RegisterConsumer(context.Background(), "billing", "c1", []string{"orders"})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Remove(context.Background())
	if st, body := postJSON(t, u+"/groups/billing/reset", fixtureToken, req); st != 409 {
		t.Fatalf("reset with a live consumer: %d %s", st, body)
	}
	req.Force = true
	if st, body := postJSON(t, u+"/groups/billing/reset", fixtureToken, req); st != 200 {
		t.Fatalf("forced reset: %d %s", st, body)
	}
}

// Without dashboardToken the server is read-only.
func TestAPIReadOnly(t *testing.T) {
	zk := zktest.Server(t)
	b := brokertest.RunBroker(t, brokertest.Options{ZK: zk, Topics: map[string]int{"orders": 1}})
	hs := runHTTP(t, b, func(o *httpapi.Options) { o.Token = "" })
	st, body := postJSON(t, hs.URL()+"/api/v1/groups/billing/reset", "anything", httpapi.ResetRequest{Topic: "orders", To: "latest"})
	if st != 403 || !strings.Contains(body, "read-only") {
		t.Fatalf("reset on a read-only server: %d %s", st, body)
	}
}

func newProducer(t *testing.T, zk string) *client.Producer {
	t.Helper()
	p, err := client.NewProducer(client.Config{ZKConnect: zk, ZKRoot: "/meta"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func sendOne(t *testing.T, ctx context.Context, p *client.Producer, topic, body string) client.SendResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, err := p.Send(ctx, &client.Message{Topic: topic, Body: []byte(body)})
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	return r
}
