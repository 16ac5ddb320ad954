package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/broker/httpapi"
	"github.com/metaqgo/metaq/protocol"
)

// publish POSTs body to /api/v1/topics/<topic>/messages?<query> with the
// given headers and returns the status and the decoded answer.
func publish(t *testing.T, base, topic, query string, hdr map[string]string, body io.Reader) (int, httpapi.PublishReply, string) {
	t.Helper()
	u := base + "/api/v1/topics/" + url.PathEscape(topic) + "/messages"
	if query != "" {
		u += "?" + query
	}
	req, err := http.NewRequest("POST", u, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var rep httpapi.PublishReply
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(raw, &rep); err != nil {
			t.Fatalf("publish answer %q: %v", raw, err)
		}
	}
	return resp.StatusCode, rep, string(raw)
}

// getRecords reads one partition from offset over the text protocol.
func getRecords(t *testing.T, b *brokertest.Broker, topic string, partition int32, offset int64) []protocol.Record {
	t.Helper()
	c := b.Dial()
	defer c.Close()
	c.Send(fmt.Sprintf("get %s g %d %d 1048576 7\r\n", topic, partition, offset))
	r := c.Reply()
	if r.Code != 200 {
		t.Fatalf("get %s-%d@%d: %d %q", topic, partition, offset, r.Code, r.Body)
	}
	return brokertest.Records(t, r.Body)
}

// A message published over HTTP is stored as a put would store it: data,
// flag, attribute, tag, keys and user properties, at the reported
// partition and offset, and counted in the topic's metrics.
func TestPublishHTTP(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) {
			b := brokertest.RunBroker(t, brokertest.Options{Sync: sync})
			hs := runHTTP(t, b, nil)
			st, rep, raw := publish(t, hs.URL(), "test", "partition=2&tag=paid&keys=o-1,o-2&p.amount=12&p.who=J%C3%BCrgen",
				map[string]string{"X-Metaq-Flag": "4"}, strings.NewReader("hello, world"))
			if st != 200 {
				t.Fatalf("publish: %d %s", st, raw)
			}
			if rep.Topic != "test" || rep.Partition != 2 || rep.Offset != 0 || rep.MsgID == "" {
				t.Fatalf("reply %+v", rep)
			}
			recs := getRecords(t, b, "test", 2, 0)
			if len(recs) != 1 {
				t.Fatalf("%d records", len(recs))
			}
			r := recs[0]
			if string(r.Data) != "hello, world" || r.Flag != 4 || strconv.FormatInt(r.MsgID, 10) != rep.MsgID {
				t.Errorf("record %+v data %q", r, r.Data)
			}
			props := r.Properties
			if protocol.Property(props, "tag") != "paid" || protocol.Property(props, "keys") != "o-1 o-2" ||
				protocol.Property(props, "amount") != "12" || protocol.Property(props, "who") != "Jürgen" {
				t.Errorf("properties %q", props)
			}

			// Headers instead of the query; an attribute; the broker picks the partition.
			st, rep, raw = publish(t, hs.URL(), "test", "", map[string]string{"X-Metaq-Tag": "refund",
				"X-Metaq-Properties": "a=1&b=x%20y", "X-Metaq-Attribute": "attr!"}, strings.NewReader("second"))
			if st != 200 {
				t.Fatalf("publish: %d %s", st, raw)
			}
			recs = getRecords(t, b, "test", rep.Partition, rep.Offset)
			r = recs[0]
			attr, payload, err := protocol.AttributeOf(r.Flag, r.Data)
			if err != nil || string(attr) != "attr!" || string(payload) != "second" {
				t.Errorf("attribute %q payload %q err %v (flag %d)", attr, payload, err, r.Flag)
			}
			if p := string(r.Properties); p != "tag=refund&a=1&b=x%20y" {
				t.Errorf("properties %q", p)
			}

			// An empty body is a message too.
			if st, _, raw := publish(t, hs.URL(), "test", "partition=0", nil, strings.NewReader("")); st != 200 {
				t.Errorf("empty body: %d %s", st, raw)
			}

			fams := scrapeMetrics(t, hs.URL())
			if v, _ := fams.value("metaq_messages_in_total", "topic", "test"); v != 3 {
				t.Errorf("metaq_messages_in_total{topic=test} = %v, want 3", v)
			}
		})
	}
}

// Delayed publishes go through the delay service: no queue offset yet.
func TestPublishHTTPDelay(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{})
	hs := runHTTP(t, b, nil)
	st, rep, raw := publish(t, hs.URL(), "test", "partition=1&delay=3", nil, strings.NewReader("later"))
	if st != 200 || rep.Offset != -1 || rep.Partition != 1 {
		t.Fatalf("delayed publish: %d %+v %s", st, rep, raw)
	}
	st, rep, raw = publish(t, hs.URL(), "test", "partition=1", map[string]string{"X-Metaq-Deliver-At": strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)}, strings.NewReader("much later"))
	if st != 200 || rep.Offset != -1 {
		t.Fatalf("deliverAt publish: %d %+v %s", st, rep, raw)
	}
	c := b.Dial()
	defer c.Close()
	c.Send("offset test g 1 0 1\r\n")
	if r := c.Reply(); string(r.Body) != "0" {
		t.Errorf("partition 1 max offset %q: the delayed messages are in the topic already", r.Body)
	}
}

// Bad input is answered 4xx with a JSON error, and nothing is stored.
func TestPublishHTTPBadInput(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{})
	hs := runHTTP(t, b, nil)
	big := strings.Repeat("x", b.Server.MaxMessageSize()+1)
	cases := []struct {
		name, topic, query string
		hdr                map[string]string
		body               string
		want               int
	}{
		{"bad topic name", "no such!", "", nil, "x", 400},
		{"unknown topic", "nowhere", "", nil, "x", 404},
		{"system topic", "%DLQ%g", "", nil, "x", 403},
		{"partition out of range", "test", "partition=4", nil, "x", 400},
		{"partition not a number", "test", "partition=one", nil, "x", 400},
		{"partition below -1", "test", "partition=-2", nil, "x", 400},
		{"flag not a number", "test", "flag=x", nil, "x", 400},
		{"flag bit 1", "test", "flag=2", nil, "x", 400},
		{"empty tag", "test", "tag=", nil, "x", 400},
		{"tag with ||", "test", "tag=a||b", nil, "x", 400},
		{"empty keys", "test", "keys=,", nil, "x", 400},
		{"bad delay", "test", "delay=soon", nil, "x", 400},
		{"delay level 0", "test", "delay=0", nil, "x", 400},
		{"deliverAt too far ahead", "test", "deliverAt=99999999999999", nil, "x", 400},
		{"bad deliverAt", "test", "deliverAt=tomorrow", nil, "x", 400},
		{"query and header", "test", "tag=a", map[string]string{"X-Metaq-Tag": "b"}, "x", 400},
		{"twice in the query", "test", "tag=a&tag=b", nil, "x", 400},
		{"user property twice", "test", "p.a=1", map[string]string{"X-Metaq-Properties": "a=2"}, "x", 400},
		{"user property shadows tag", "test", "tag=a&p.tag=b", nil, "x", 400},
		{"unnamed user property", "test", "p.=1", nil, "x", 400},
		{"half message", "test", "p.tx=half&p.pgroup=pg", nil, "x", 400},
		{"too large", "test", "", nil, big, 413},
		{"too large with attribute", "test", "attribute=abc", nil, big[:len(big)-4], 413},
	}
	// Refused by the put path, not by the gateway's parsing.
	putPath := map[string]bool{"partition out of range": true, "deliverAt too far ahead": true, "half message": true}
	badBefore := scrapeMetrics(t, hs.URL()).must(t, "metaq_bad_requests_total")
	parseErrors := 0
	for _, tc := range cases {
		if tc.want == 400 && !putPath[tc.name] {
			parseErrors++
		}
		st, _, raw := publish(t, hs.URL(), tc.topic, tc.query, tc.hdr, strings.NewReader(tc.body))
		if st != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, st, raw, tc.want)
			continue
		}
		var e map[string]string
		if err := json.Unmarshal([]byte(raw), &e); err != nil || e["error"] == "" {
			t.Errorf("%s: answer %q is not a JSON error", tc.name, raw)
		}
	}
	// The gateway's parse errors count as the text protocol's bad requests.
	if got := scrapeMetrics(t, hs.URL()).must(t, "metaq_bad_requests_total") - badBefore; got != float64(parseErrors) {
		t.Errorf("metaq_bad_requests_total moved by %v for %d refused parameters", got, parseErrors)
	}
	// A chunked body (no Content-Length) over the limit.
	pr, pw := io.Pipe()
	go func() {
		for i := 0; i < 3; i++ {
			if _, err := pw.Write([]byte(big[:len(big)/2])); err != nil {
				return
			}
		}
		pw.Close()
	}()
	if st, _, raw := publish(t, hs.URL(), "test", "", nil, pr); st != 413 {
		t.Errorf("chunked too large: %d %s", st, raw)
	}
	pr.CloseWithError(io.ErrClosedPipe)
	// Nothing was stored.
	c := b.Dial()
	defer c.Close()
	for p := 0; p < 4; p++ {
		c.Send(fmt.Sprintf("offset test g %d 0 1\r\n", p))
		if r := c.Reply(); string(r.Body) != "0" {
			t.Errorf("partition %d max offset %q after refused publishes", p, r.Body)
		}
	}
	// The dashboard-only server (no broker) has no publish endpoint.
	st, _, _ := publish(t, runDashboard(t).URL(), "test", "", nil, strings.NewReader("x"))
	if st != 404 && st != 405 {
		t.Errorf("publish without a broker: %d", st)
	}
}

// Concurrent publishers all get distinct offsets.
func TestPublishHTTPConcurrent(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Sync: true})
	hs := runHTTP(t, b, nil)
	const workers, each = 8, 25
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[int64]bool{}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				st, rep, raw := publish(t, hs.URL(), "test", "partition=3", nil, strings.NewReader(fmt.Sprintf("m%d-%d", w, i)))
				if st != 200 {
					t.Errorf("publish: %d %s", st, raw)
					return
				}
				mu.Lock()
				if seen[rep.Offset] {
					t.Errorf("offset %d twice", rep.Offset)
				}
				seen[rep.Offset] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != workers*each {
		t.Errorf("%d offsets, want %d", len(seen), workers*each)
	}
}

func runDashboard(t *testing.T) *httpapi.Server {
	t.Helper()
	hs, err := httpapi.Start(httpapi.Options{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hs.Close() })
	return hs
}
