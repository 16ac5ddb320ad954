package broker

import "testing"

// BenchmarkStopParked: a connection's reader stops while n of its parked
// gets are still linked but being answered by their wakers (state
// parkDone, not yet unlinked) — stopParked must pass over them once, not
// rescan the list from its head after each one.
func BenchmarkStopParked(b *testing.B) {
	const n = 10000
	pgs := make([]parkedGet, n)
	c := &conn{}
	b.ReportAllocs()
	for b.Loop() {
		c.pk.list = nil
		c.parked.Store(n)
		for i := range pgs {
			pg := &pgs[i]
			pg.c, pg.prev, pg.next = c, nil, c.pk.list
			pg.expired.Store(false)
			pg.state.Store(parkDone)
			if c.pk.list != nil {
				c.pk.list.prev = pg
			}
			c.pk.list = pg
		}
		c.stopParked()
	}
	for i := range pgs {
		if !pgs[i].expired.Load() {
			b.Fatalf("parked get %d not stopped", i)
		}
	}
}
