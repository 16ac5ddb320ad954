package httpapi_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/metaqgo/metaq/broker/httpapi"
)

// chromium finds Debian's chromium (scripts/test.sh installs it). Without
// one the browser tests are skipped, unless CI is set: there they must run.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium found and CI is set: the browser tests must run (apt-get install -y chromium)")
	}
	t.Skip("no chromium found (apt-get install -y chromium, or run scripts/test.sh which installs it)")
	return ""
}

// browser starts a headless Chromium with a fresh profile and collects
// console errors, uncaught exceptions and browser-log errors (failed loads).
type browser struct {
	ctx  context.Context
	mu   sync.Mutex
	errs []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := chromium(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 860),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, 3*time.Minute)
	b := &browser{ctx: ctx}
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		cancelT()
		cancelB()
		cancelA()
		t.Fatalf("starting chromium (%s): %v", path, err)
	}
	lctx, stopListening := context.WithCancel(ctx)
	done := make(chan struct{})
	msgs := chromedp.Console(lctx) // subscribed now
	go func() {
		defer close(done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.mu.Lock()
				b.errs = append(b.errs, m.String())
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { stopListening(); <-done; cancelT(); cancelB(); cancelA() })
	return b
}

// errors returns and clears the collected errors.
func (b *browser) errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.errs
	b.errs = nil
	return e
}

// text returns the visible text of the element sel selects.
func (b *browser) text(t *testing.T, sel string) string {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return v
}

func (b *browser) eval(t *testing.T, expr string) bool {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

func (b *browser) do(t *testing.T, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// open loads url, waits until the page's scripts ran, checks there were no
// browser errors and returns the visible text of <main>.
func (b *browser) open(t *testing.T, url string) string {
	t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("main h1"))); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](`document.readyState === "complete"`)); err != nil {
		t.Fatal(err)
	}
	text := b.text(t, "main")
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("%s: browser errors:\n  %s", url, strings.Join(errs, "\n  "))
	}
	return text
}

// screenshot saves the page as docs/img/<name>.png when METAQ_SCREENSHOTS=1.
func (b *browser) screenshot(t *testing.T, name string) {
	t.Helper()
	if os.Getenv("METAQ_SCREENSHOTS") != "1" {
		return
	}
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("..", "..", "docs", "img")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Every page loads without console errors against a real broker and
// ZooKeeper, shows the topic and the lag the test produced, the lookup finds
// a message, and the guarded reset needs the token.
func TestDashboardInBrowser(t *testing.T) {
	b := newBrowser(t)
	f := newClusterFixture(t)
	base := f.hs.URL()

	text := b.open(t, base+"/")
	if !strings.Contains(text, f.b.Addr) || !strings.Contains(text, "master") {
		t.Errorf("cluster page does not show the broker %s:\n%s", f.b.Addr, text)
	}
	b.screenshot(t, "cluster")

	waitFor(t, "topics page with orders", func() bool {
		return strings.Contains(b.open(t, base+"/topics"), "orders")
	})
	// Let the sampler take a few samples for the charts of the screenshot.
	if os.Getenv("METAQ_SCREENSHOTS") == "1" {
		ctx := context.Background()
		p := newProducer(t, f.zk)
		for i := 0; i < 3; i++ {
			for j := 0; j < 50*(i+1); j++ {
				sendOne(t, ctx, p, "orders", fmt.Sprintf("more %d", j))
			}
			time.Sleep(5500 * time.Millisecond) // screenshots only: wait for the next sample
		}
		p.Close()
		b.open(t, base+"/topics")
	}
	b.screenshot(t, "topics")

	text = b.open(t, base+"/topics/orders")
	if !strings.Contains(text, "0-0") || !strings.Contains(text, "0-1") || !strings.Contains(text, "billing") {
		t.Errorf("topic page:\n%s", text)
	}
	b.screenshot(t, "topic")

	text = b.open(t, base+"/groups")
	if !strings.Contains(text, "billing") || !strings.Contains(text, "no member") {
		t.Errorf("groups page:\n%s", text)
	}

	want := f.wantLag()
	if os.Getenv("METAQ_SCREENSHOTS") == "1" {
		var gv httpapi.GroupView
		getJSON(t, base+"/api/v1/groups/billing", &gv)
		want = gv.Lag
	}
	// The page is rendered from what the broker and ZooKeeper answer at that
	// moment; on a loaded machine the first rendering may come before the
	// partitions' offsets are readable (lag 0), so reload until it agrees.
	var lag string
	waitFor(t, "group page with the produced lag", func() bool {
		b.open(t, base+"/groups/billing")
		lag = b.text(t, "#total-lag")
		return lag == fmt.Sprint(want)
	})
	b.screenshot(t, "group")

	// Lookup by id through the form.
	b.open(t, base+"/messages")
	b.do(t, chromedp.SetValue(chromedp.CSS(`input[name="id"]`), fmt.Sprint(f.keyed.MsgID)),
		chromedp.Submit(chromedp.CSS(`#lookup`)), chromedp.WaitVisible(chromedp.CSS(`#found`)))
	found, id := b.text(t, "#found"), b.text(t, ".msgid")
	if found != "1 message(s)" || id != fmt.Sprint(f.keyed.MsgID) {
		t.Errorf("lookup by id: %q %q", found, id)
	}
	if !b.eval(t, `!document.querySelector('[data-pane="json"]').hidden`) {
		t.Error("a JSON body does not open in the JSON view")
	}
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("lookup: browser errors: %v", errs)
	}
	b.screenshot(t, "message")
	text = b.open(t, base+"/messages?topic=orders&key=order-7")
	if !strings.Contains(text, "1 message(s)") || !strings.Contains(text, "order-7") {
		t.Errorf("lookup by key:\n%s", text)
	}
	b.open(t, base+"/messages?topic=orders&time=-1h")
	if found := b.text(t, "#found"); found == "0 message(s)" || !strings.HasSuffix(found, " message(s)") {
		t.Errorf("lookup by time: %q", found)
	}

	// The guarded reset: refused without the token, done with it.
	b.open(t, base+"/groups/billing")
	b.do(t, chromedp.Click(chromedp.CSS(`#skip`)), chromedp.WaitReady(chromedp.CSS(`#reset-result[data-status]`)))
	if st := b.text(t, "#reset-result"); !strings.HasPrefix(st, "401") {
		t.Fatalf("reset without the token answered %q", st)
	}
	b.errors() // the 401 response is logged by the browser as a failed load
	b.do(t, chromedp.SetValue(chromedp.CSS(`input[name="token"]`), fixtureToken),
		chromedp.Click(chromedp.CSS(`#skip`)), chromedp.WaitReady(chromedp.CSS(`#reset-result[data-status="200"]`)))
	var gv httpapi.GroupView
	if getJSON(t, base+"/api/v1/groups/billing", &gv); gv.Lag != 0 {
		t.Errorf("lag after skip to latest: %d", gv.Lag)
	}
	text = b.open(t, base+"/groups/billing")
	if !strings.Contains(text, "total lag 0") {
		t.Errorf("group page after the reset:\n%s", text)
	}
}
