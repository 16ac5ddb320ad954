package cli

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/zkmeta"
)

// `metaq consume --group` is a client.Consumer: its share of a group's partitions is
// client.Assign's. It must be MetaQ's balance, so that the CLI, Go client consumers and
// MetaQ's Java consumers can share a group.
func TestShareIsMetaQBalance(t *testing.T) {
	share := client.Assign
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

// metaqShare is MetaQ's balance stated another way: in name order, each consumer takes
// ⌈remaining partitions / remaining consumers⌉ of the partitions in (broker, partition) order.
func metaqShare(parts []zkmeta.Partition, consumers []string, me string) []zkmeta.Partition {
	ps := append([]zkmeta.Partition(nil), parts...)
	sort.Slice(ps, func(i, j int) bool { return ps[i].Less(ps[j]) })
	cs := append([]string(nil), consumers...)
	sort.Strings(cs)
	for i, c := range cs {
		left := len(cs) - i
		n := (len(ps) + left - 1) / left
		if c == me {
			return ps[:n]
		}
		ps = ps[n:]
	}
	return nil
}

// The CLI's group consumer and the Go client's consumers may share a group: they compute the
// same balance, MetaQ's, for any partitions and consumers.
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
			if a, b := fmt.Sprint(metaqShare(parts, cs, me)), fmt.Sprint(client.Assign(parts, cs, me)); a != b {
				t.Fatalf("parts %v consumers %v me %s: MetaQ %s, client %s", parts, cs, me, a, b)
			}
		}
	}
}
