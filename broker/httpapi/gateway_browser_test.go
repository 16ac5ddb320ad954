package httpapi_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// The browser's own WebSocket (headless Chromium) publishes with fetch,
// receives the group's messages and acknowledges them; afterwards the
// group has nothing left but what is published next.
func TestWSInBrowser(t *testing.T) {
	br := newBrowser(t)
	b := brokertest.RunBroker(t, brokertest.Options{Sync: true})
	hs := runHTTP(t, b, withDelivery(b))
	const n = 12
	publishN(t, hs, "test", n/2, "go")
	br.open(t, hs.URL()+"/messages") // any page of the server's origin
	// The page publishes the other half itself.
	script := fmt.Sprintf(`(async () => {
  for (let i = 0; i < %d; i++) {
    const r = await fetch("/api/v1/topics/test/messages?tag=web&keys=w" + i, {method: "POST", body: "web-" + i + " ü"});
    if (r.status !== 200) throw new Error("publish " + r.status + " " + await r.text());
  }
  window.got = []; window.errs = []; window.acked = 0; window.maxOut = 0;
  let out = 0;
  const ws = new WebSocket("ws://" + location.host + "/api/v1/groups/web/topics/test/ws?max=4&invisibleMs=600000");
  ws.onmessage = (ev) => {
    const f = JSON.parse(ev.data);
    if (f.type === "message") {
      out++; window.maxOut = Math.max(window.maxOut, out);
      window.got.push(f.body);
      ws.send(JSON.stringify({op: "ack", handle: f.handle, id: f.msgId}));
      out--; // unacknowledged = received - acks sent
    } else if (f.type === "done") {
      window.acked += f.ok;
    } else if (f.type === "error") {
      window.errs.push(f.error);
    }
  };
  ws.onerror = () => window.errs.push("socket error");
  window.ws = ws;
  return true;
})()`, n/2)
	if _, err := chromedp.Run(br.ctx, chromedp.Evaluate[bool](script, chromedp.EvalAwaitPromise)); err != nil {
		t.Fatalf("page script: %v", err)
	}
	// Bounded well inside the browser's own deadline, so that a timeout reports what the page had.
	pctx, cancelPoll := context.WithTimeout(br.ctx, 90*time.Second)
	_, err := chromedp.Run(pctx, chromedp.Poll[bool](fmt.Sprintf(`window.acked === %d || window.errs.length > 0`, n)))
	cancelPoll()
	if err != nil {
		state, _ := chromedp.Run(br.ctx, chromedp.Evaluate[string](`JSON.stringify({acked: window.acked, got: window.got, errs: window.errs, readyState: window.ws && window.ws.readyState})`))
		t.Fatalf("waiting for the page to have %d messages acknowledged: %v; the page has %s; browser errors %q", n, err, state, br.errors())
	}
	got, err := chromedp.Run(br.ctx, chromedp.Evaluate[[]string](`window.got`))
	if err != nil {
		t.Fatal(err)
	}
	errs, err := chromedp.Run(br.ctx, chromedp.Evaluate[[]string](`window.errs`))
	if err != nil {
		t.Fatal(err)
	}
	maxOut, err := chromedp.Run(br.ctx, chromedp.Evaluate[int](`window.maxOut`))
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) > 0 {
		t.Fatalf("page errors: %v", errs)
	}
	if maxOut > 4 {
		t.Errorf("%d messages unacknowledged at once, max=4", maxOut)
	}
	var want []string
	for i := 0; i < n/2; i++ {
		want = append(want, fmt.Sprintf("go-%d", i), fmt.Sprintf("web-%d ü", i))
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("the page got %q, want %q", got, want)
	}
	if errs := br.errors(); len(errs) > 0 {
		t.Errorf("browser errors:\n  %s", strings.Join(errs, "\n  "))
	}
	if _, err := chromedp.Run(br.ctx, chromedp.Evaluate[bool](`window.ws.close(); true`)); err != nil {
		t.Fatal(err)
	}
	// ws.close() only starts the closing handshake. Until the gateway has ended the page's
	// connection, the page's receiver may still be long-polling for the group, and a marker it
	// took then would stay invisible for the page's invisibleMs (10 minutes): wait for the
	// gateway to drop it before the marker is published.
	zktest.Eventually(t, 60*time.Second, func() bool { return hs.WSConnections() == 0 },
		"waiting for the gateway to end the page's WebSocket after ws.close() (%d open)", hs.WSConnections())
	// Everything was acknowledged: the next message of the group is the next one published.
	w := wsDial(t, hs, "web", "test", "max=10")
	if st, _, raw := publish(t, hs.URL(), "test", "", nil, strings.NewReader("marker")); st != 200 {
		t.Fatalf("publish: %d %s", st, raw)
	}
	for {
		m, err := w.read()
		if err != nil {
			t.Fatalf("waiting for the marker on a fresh connection of group web (the page acked everything): %v", err)
		}
		if m.Type != "message" {
			continue
		}
		if m.Body != "marker" {
			t.Fatalf("after the page acked everything: %+v", m)
		}
		break
	}
}
