package cli

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/metaqgo/metaq/benchkit"
	"github.com/metaqgo/metaq/broker/brokertest"
)

// The delay workload's four phases run against a real broker and report sane numbers
// (small sizes: this checks the machinery, not the figures).
func TestBenchDelay(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"bench": 2}, SegSize: 64 << 20})
	out, errs, code := runBench(t, "bench", "delay", "--json", "--server", b.Addr, "--duration", "300ms",
		"--delay-rate", "2000", "--delay-lead", "500ms", "--delay-burst", "2000", "--delay-pending", "3000",
		"--server-pid", strconv.Itoa(os.Getpid())) // the broker runs in this process
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	rs, err := benchkit.ReadResults(strings.NewReader(out))
	if err != nil || len(rs) != 4 {
		t.Fatalf("want 4 results: %v\n%s", err, out)
	}
	for i, want := range []string{"delay-put", "delay-lateness", "delay-burst", "delay-pending"} {
		r := rs[i]
		if r.Workload != want || r.Error != "" || r.Msgs <= 0 {
			t.Fatalf("result %d: %+v", i, r)
		}
	}
	if rs[0].DegradationRatio <= 0 || rs[0].BaselineMsgsPerSec <= 0 {
		t.Fatalf("delay-put has no baseline: %+v", rs[0])
	}
	if rs[1].P99us <= 0 || rs[2].Msgs != 2000 || rs[2].MaxUs <= 0 {
		t.Fatalf("lateness/burst: %+v %+v", rs[1], rs[2])
	}
	if !strings.Contains(rs[3].Notes, "RssAnon") || rs[3].Msgs != 3000 {
		t.Fatalf("pending: %+v", rs[3])
	}
	if _, _, code := runBench(t, "bench", "delay", "--server", b.Addr, "--delay-phases", "nope"); code != ExitUsage {
		t.Fatalf("bad --delay-phases: exit %d", code)
	}
}
