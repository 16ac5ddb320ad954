package httpapi_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/broker/httpapi"
)

// With anonymous=none a real browser is sent to the login page, logs in,
// sees who it is in the header, logs out with the header's button, and is
// then sent to the login page again (the session is gone on the server, not
// only the cookie in the browser).
func TestDashboardLoginLogoutInBrowser(t *testing.T) {
	br := newBrowser(t)
	dir := t.TempDir()
	users := brokertest.RootUsersFile(t, dir, "pw-root")
	b := brokertest.RunBroker(t, brokertest.Options{Dir: dir, Topics: map[string]int{"orders": 1},
		ExtraINI: fmt.Sprintf("\n[security]\nusersFile=%s\nanonymous=none\n", users)})
	sec, err := httpapi.BrokerSecurity(b.Broker)
	if err != nil {
		t.Fatal(err)
	}
	hs := runHTTP(t, b, func(o *httpapi.Options) { o.Security = sec })
	base := hs.URL()

	location := func() string {
		t.Helper()
		v, err := chromedp.Run(br.ctx, chromedp.Evaluate[string](`location.pathname`))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	loginForm := chromedp.WaitVisible(chromedp.CSS(`input[name="user"]`))
	// after a click that navigates, a query started on the old page can wait
	// forever; evaluate afresh on whatever page is current until sel is there
	waitPage := func(what, sel string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			ok, err := chromedp.Run(br.ctx, chromedp.Evaluate[bool](`document.readyState === "complete" && document.querySelector(`+"`"+sel+"`"+`) !== null`))
			if err == nil && ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s never appeared (last error %v)", what, sel, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	br.do(t, chromedp.Navigate(base+"/messages"), loginForm)
	if p := location(); p != "/login" {
		t.Fatalf("anonymous /messages ended at %s, want the login page", p)
	}
	br.do(t,
		chromedp.SendKeys(chromedp.CSS(`input[name="user"]`), "root"),
		chromedp.SendKeys(chromedp.CSS(`input[name="secret"]`), "pw-root"),
		chromedp.Click(chromedp.CSS(`button[type="submit"]`)))
	waitPage("after login", `#logout`)
	if p := location(); p != "/messages" {
		t.Errorf("after login the browser is at %s, want /messages (the page it asked for)", p)
	}
	if u := br.text(t, "#user"); strings.TrimSpace(u) != "root" {
		t.Errorf("header shows user %q, want root", u)
	}

	br.do(t, chromedp.Click(chromedp.CSS(`#logout`)))
	waitPage("after logout", `input[name="user"]`)
	if p := location(); p != "/login" {
		t.Fatalf("after logout the browser is at %s, want the login page", p)
	}
	br.do(t, chromedp.Navigate(base+"/messages"), loginForm)
	if p := location(); p != "/login" {
		t.Fatalf("/messages after logout ended at %s, want the login page", p)
	}
	if errs := br.errors(); len(errs) > 0 {
		t.Errorf("browser errors:\n  %s", strings.Join(errs, "\n  "))
	}
}
