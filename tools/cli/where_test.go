package cli

import (
	"slices"
	"strings"
	"testing"

	"github.com/metaqgo/metaq/broker/brokertest"
)

// metaq consume --where: the broker selects by expression, anonymously and
// as a group member; a bad expression is a usage error naming its position.
func TestConsumeWhere(t *testing.T) {
	c := newCluster(t, 1, map[string]int{"orders": 2}, false)
	for _, tag := range []string{"a", "b", "c"} {
		c.mustRun("produce", "-t", "orders", "--tag", tag, "-m", tag+"1", "-m", tag+"2", "--quiet")
	}
	for _, args := range [][]string{
		{"consume", "-t", "orders", "--from", "earliest", "--where", "TAGS IN ('a','c')", "--count", "4", "--timeout", "20s"},
		{"consume", "-t", "orders", "-g", "where-g", "--where", "tag = 'a' OR tag = 'c'", "--count", "4", "--timeout", "20s"},
	} {
		out := c.mustRun(args...)
		lines := strings.Fields(out)
		slices.Sort(lines)
		if !slices.Equal(lines, []string{"a1", "a2", "c1", "c2"}) {
			t.Fatalf("%v printed %q", args, out)
		}
	}
	_, stderr, code := c.run("consume", "-t", "orders", "--where", "TAGS IN ('a',", "--timeout", "5s")
	if code != ExitUsage || !strings.Contains(stderr, "syntax error at position 14") {
		t.Fatalf("bad --where: exit %d, stderr %q", code, stderr)
	}
}

// metaq bench consume --where drains the same backlog unfiltered and
// filtered and delivers exactly the kept share (bench=i%10 over 97 variants:
// 10 of every 97 for "bench = 0").
func TestBenchConsumeWhere(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: benchTopics(), SegSize: 64 << 20})
	out, errs, code := runBench(t, "bench", "consume", "--json", "--server", b.Addr, "--topic", "multi", "--count", "970",
		"--where", "bench = 0", "--fetch-size", "20000", "--fetch-depth", "2")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	r := oneResult(t, out)
	if r.Error != "" || r.Msgs != 100 || !strings.Contains(r.Notes, "% of the unfiltered rate") {
		t.Fatalf("%+v", r)
	}
	_, errs, code = runBench(t, "bench", "consume", "--json", "--server", b.Addr, "--topic", "multi", "--count", "10", "--where", "bench =")
	if code == 0 || !strings.Contains(errs+out, "position") {
		t.Fatalf("bad --where: exit %d %s", code, errs)
	}
}
