package cli

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/zkmeta"
)

func TestShareIsMetaQBalance(t *testing.T) {
	var parts []zkmeta.Partition
	for b := range 2 {
		for p := range 4 {
			parts = append(parts, zkmeta.Partition{BrokerID: b, Partition: p})
		}
	}
	cs := []string{"g_c", "g_a", "g_b"} // unsorted on purpose
	got := map[string]string{}
	total := 0
	for _, c := range cs {
		s := share(parts, cs, c)
		total += len(s)
		got[c] = fmt.Sprint(s)
	}
	// 8 partitions, 3 consumers: 3, 3, 2 in sorted consumer order.
	want := map[string]string{
		"g_a": "[0-0 0-1 0-2]",
		"g_b": "[0-3 1-0 1-1]",
		"g_c": "[1-2 1-3]",
	}
	if total != 8 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("share = %v, want %v", got, want)
	}
	if s := share(parts, cs, "g_unknown"); len(s) != 0 {
		t.Fatalf("a consumer that is not registered got %v", s)
	}
	if s := share(parts[:1], cs, "g_b"); len(s) != 0 {
		t.Fatalf("more consumers than partitions: g_b got %v", s)
	}
}

// The CLI's group consumer and the Go client's consumers may share a group: they must compute
// the same balance.
func TestShareMatchesClientAssign(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		var parts []zkmeta.Partition
		for b := range 1 + r.IntN(4) {
			for p := range r.IntN(9) {
				parts = append(parts, zkmeta.Partition{BrokerID: b, Partition: p})
			}
		}
		r.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
		var cs []string
		for i := range 1 + r.IntN(6) {
			cs = append(cs, fmt.Sprintf("g_c%d-%d", r.IntN(100), i))
		}
		for _, me := range cs {
			if a, b := fmt.Sprint(share(parts, cs, me)), fmt.Sprint(client.Assign(parts, cs, me)); a != b {
				t.Fatalf("parts %v consumers %v me %s: cli %s, client %s", parts, cs, me, a, b)
			}
		}
	}
}
