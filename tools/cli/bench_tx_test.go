package cli

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/metaqgo/metaq/benchkit"
	"github.com/metaqgo/metaq/broker/brokertest"
)

// The tx workload's three phases run against a real sync-flush broker and
// report sane numbers (small: this checks the machinery, not the figures).
func TestBenchTx(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Sync: true, Topics: map[string]int{"bench": 2}, SegSize: 64 << 20})
	out, errs, code := runBench(t, "bench", "tx", "--json", "--server", b.Addr, "--duration", "300ms",
		"--conns", "2", "--window", "8", "--tx-size", "3", "--sync", "--server-pid", strconv.Itoa(os.Getpid()))
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	rs, err := benchkit.ReadResults(strings.NewReader(out))
	if err != nil || len(rs) != 3 {
		t.Fatalf("want 3 results: %v\n%s", err, out)
	}
	for i, want := range []string{"tx-plain", "tx-local", "tx-half-commit"} {
		if r := rs[i]; r.Workload != want || r.Error != "" || r.Msgs <= 0 {
			t.Fatalf("result %d: %+v", i, r)
		}
	}
	if rs[1].Msgs%3 != 0 || rs[2].BaselineMsgsPerSec <= 0 || rs[2].DegradationRatio <= 0 {
		t.Fatalf("local/half: %+v %+v", rs[1], rs[2])
	}
	if _, _, code := runBench(t, "bench", "tx", "--server", b.Addr, "--tx-phases", "nope"); code != ExitUsage {
		t.Fatalf("bad --tx-phases: exit %d", code)
	}
}
