package httpapi_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/broker/httpapi"
	"github.com/metaqgo/metaq/zkmeta"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

// docMetric is one metric of docs/observability.md's tables.
type docMetric struct {
	typ    string
	labels []string // sorted
}

var (
	docRow      = regexp.MustCompile("^\\| (`metaq_[^|]*(?:\\|[^|]*)*?`[^|]*) \\| (counter|gauge|histogram) \\|")
	docName     = regexp.MustCompile("`(metaq_[a-z_]+)(\\{[^`]*\\})?`")
	docLabel    = regexp.MustCompile(`([a-z_]+)(?:=|,|\}$)`)
	docSection  = regexp.MustCompile("^### .*\\(label `([a-z_]+)`\\)")
	alertMetric = regexp.MustCompile(`metaq_[a-z_]+`)
)

// parseObservability reads the metric tables of docs/observability.md: the
// first column's names (with their {labels}) and the type column; a
// section titled "(label `x`)" gives its rows label x.
func parseObservability(t *testing.T) map[string]docMetric {
	t.Helper()
	text, err := os.ReadFile("../../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]docMetric{}
	var sectionLabel string
	for _, line := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(line, "#") {
			sectionLabel = ""
			if m := docSection.FindStringSubmatch(line); m != nil {
				sectionLabel = m[1]
			}
			continue
		}
		// A cell may hold \| (escaped pipes between label values).
		row := strings.ReplaceAll(line, `\|`, "¦")
		m := docRow.FindStringSubmatch(row)
		if m == nil {
			continue
		}
		for _, n := range docName.FindAllStringSubmatch(m[1], -1) {
			var labels []string
			if sectionLabel != "" {
				labels = append(labels, sectionLabel)
			}
			if n[2] != "" {
				for _, l := range docLabel.FindAllStringSubmatch(n[2][1:], -1) {
					labels = append(labels, l[1])
				}
			}
			sort.Strings(labels)
			if _, dup := out[n[1]]; dup {
				t.Errorf("docs/observability.md lists %s twice", n[1])
			}
			out[n[1]] = docMetric{typ: m[2], labels: labels}
		}
	}
	if len(out) < 50 {
		t.Fatalf("found only %d metrics in docs/observability.md's tables: is the parser broken?", len(out))
	}
	return out
}

func familyLabels(f *dto.MetricFamily) []string {
	set := map[string]bool{}
	for _, m := range f.Metric {
		for _, l := range m.Label {
			set[l.GetName()] = true
		}
	}
	var labels []string
	for l := range set {
		labels = append(labels, l)
	}
	sort.Strings(labels)
	return labels
}

// Every metaq_* family a broker exports is in docs/observability.md's
// tables with that type and those labels, every metric there is exported,
// and every metric docs/alerts.yml uses is exported. The families are
// scraped from a ZooKeeper broker with [security], traffic and committed
// offsets (lag), and from a slave (replication).
func TestMetricsMatchDocs(t *testing.T) {
	docs := parseObservability(t)

	zkAddr := zktest.Server(t)
	dir := t.TempDir()
	users := filepath.Join(dir, "users.ini")
	if err := os.WriteFile(users, []byte("[root]\nadmin = true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := brokertest.RunBroker(t, brokertest.Options{Dir: dir, ZK: zkAddr, BrokerID: 5, Topics: map[string]int{"orders": 1},
		ExtraINI: "\n[security]\nusersFile=" + users + "\n"})
	sec, err := httpapi.BrokerSecurity(b.Broker)
	if err != nil {
		t.Fatal(err)
	}
	hs := runHTTP(t, b, func(o *httpapi.Options) { o.Security = sec })
	c := b.Dial()
	c.Put("orders", 0, "m", 1)
	zc, err := zkmeta.Connect(context.Background(), zkmeta.Config{ConnectString: zkAddr, Root: "/meta"})
	if err != nil {
		t.Fatal(err)
	}
	defer zc.Close()
	if err := zc.CommitOffset(context.Background(), "billing", "orders", zkmeta.Partition{BrokerID: 5, Partition: 0}, zkmeta.Offset{MsgID: -1, Offset: 0}); err != nil {
		t.Fatal(err)
	}
	var s scrape
	waitFor(t, "lag series", func() bool {
		hs.RefreshLag()
		s = scrapeMetrics(t, hs.URL())
		_, ok := s.value("metaq_consumer_lag_messages", "group", "billing")
		return ok
	})

	slave := brokertest.RunBroker(t, brokertest.Options{Sync: true,
		ExtraINI: "\n[slave]\nslaveId=0\n[replication]\nmasterAddr=127.0.0.1:1\n"})
	for name, f := range scrapeMetrics(t, runHTTP(t, slave, nil).URL()) {
		if s[name] == nil {
			s[name] = f
		}
	}

	for name, f := range s {
		if !strings.HasPrefix(name, "metaq_") {
			continue
		}
		d, ok := docs[name]
		if !ok {
			t.Errorf("/metrics exports %s (%s), which docs/observability.md's tables do not list", name, f.GetHelp())
			continue
		}
		if typ := strings.ToLower(f.GetType().String()); typ != d.typ {
			t.Errorf("%s is a %s, docs/observability.md says %s", name, typ, d.typ)
		}
		if got := familyLabels(f); strings.Join(got, ",") != strings.Join(d.labels, ",") {
			t.Errorf("%s has labels %v, docs/observability.md says %v", name, got, d.labels)
		}
	}
	for name := range docs {
		if s[name] == nil {
			t.Errorf("docs/observability.md lists %s, which /metrics does not export", name)
		}
	}
	rules, err := os.ReadFile("../../docs/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range alertMetric.FindAllString(string(rules), -1) {
		if s[name] == nil {
			t.Errorf("docs/alerts.yml uses %s, which /metrics does not export", name)
		}
	}
}
