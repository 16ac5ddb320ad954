package client

import (
	"strconv"
	"strings"
	"testing"
)

// A route is found whether or not the send's topic shares its bytes with the
// string the route was made for; one that does lands in the slot table, and
// a table grown for more routes still finds every route.
func TestRouteMapSlots(t *testing.T) {
	var rm routeMap
	if rm.load("none") != nil {
		t.Fatal("a route in an empty map")
	}
	names := make([]string, 1000)
	routes := make([]*topicRoute, len(names))
	for i := range names {
		names[i] = "t-" + strconv.Itoa(i)
		routes[i] = &topicRoute{topic: names[i]}
		if got, added := rm.loadOrAddLocked(names[i], routes[i]); !added || got != routes[i] {
			t.Fatalf("adding %s", names[i])
		}
		if i%97 == 0 { // lookups while the table grows
			for j := 0; j <= i; j++ {
				if rm.load(names[j]) != routes[j] {
					t.Fatalf("after %d routes: %s not found", i+1, names[j])
				}
			}
		}
	}
	if n := len(*rm.slots.Load()); n != 8192 {
		t.Fatalf("%d slots for 1,000 routes, want 8192", n)
	}
	for round := range 2 {
		for i, name := range names {
			if rm.load(name) != routes[i] {
				t.Fatalf("round %d: %s not found", round, name)
			}
			copyOf := strings.Clone(name) // same name, other bytes: the map finds it
			if rm.load(copyOf) != routes[i] {
				t.Fatalf("round %d: a copy of %s not found", round, name)
			}
		}
	}
	// Every slot some route's name maps to holds a route (the first to get
	// there); routes whose slot another took go to the map.
	slots := *rm.slots.Load()
	used := map[int]bool{}
	for _, name := range names {
		i := routeSlot(name, len(slots))
		used[i] = true
		if slots[i].Load() == nil {
			t.Fatalf("the slot of %s is empty after it was sent to", name)
		}
	}
	cached := 0
	for i := range slots {
		if rt := slots[i].Load(); rt != nil {
			cached++
			if routeSlot(rt.topic, len(slots)) != i {
				t.Fatalf("route %s in slot %d, not its own", rt.topic, i)
			}
		}
	}
	if cached != len(used) {
		t.Fatalf("%d routes in the slot table, want one for each of the %d slots used", cached, len(used))
	}
	t.Logf("%d of 1,000 routes in the slot table", cached)
	if rm.load("t-1000") != nil {
		t.Fatal("a route for a topic never added")
	}
}

func TestRouteLookupZeroAllocs(t *testing.T) {
	var rm routeMap
	names := make([]string, 100)
	for i := range names {
		names[i] = "z-" + strconv.Itoa(i)
		rm.loadOrAddLocked(names[i], &topicRoute{topic: names[i]})
	}
	i := 0
	if a := testing.AllocsPerRun(1000, func() {
		if rm.load(names[i%len(names)]) == nil {
			t.Fatal("not found")
		}
		i++
	}); a != 0 {
		t.Fatalf("%.1f allocations per lookup", a)
	}
}
