package benchkit

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// StallProbe measures how late the machine wakes a sleeping thread while a
// latency workload runs: one OS thread sleeps StallNap at a time with
// nanosleep(2) (timer slack 1 ns) and records by how much each sleep
// overran. On an idle, dedicated machine that is a few µs; a virtual
// machine whose vCPU is descheduled by its host, or a machine shared with
// other work, shows the stall in the probe's p99 and max. Run it in the
// same minutes as each system's latency and e2e runs, so a p99 is read next
// to what the machine did to a thread that had nothing to do but wake up.
//
// The probe costs one wake-up per nap (~770/s), the same for every system
// measured; the nap is not a multiple of 1 ms, so the probe's wake-ups drift
// across the e2e workload's 1 ms schedule instead of meeting it at one phase.
type StallProbe struct {
	stop chan struct{}
	done chan struct{}
	h    Histogram
}

// StallNap is how long the probe sleeps each time.
const StallNap = 1300 * time.Microsecond

// StartStallProbe starts a probe; Stop ends it.
func StartStallProbe() *StallProbe {
	p := &StallProbe{stop: make(chan struct{}), done: make(chan struct{})}
	go p.run()
	return p
}

func (p *StallProbe) run() {
	defer close(p.done)
	runtime.LockOSThread() // the slack setting is per thread; the thread exits with the goroutine
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	ts := unix.NsecToTimespec(int64(StallNap))
	for { // at least one nap, however soon Stop comes
		t0 := time.Now()
		_ = unix.Nanosleep(&ts, nil) // EINTR: a short sleep, recorded as on time
		p.h.Record(max(time.Since(t0)-StallNap, 0))
		select {
		case <-p.stop:
			return
		default:
		}
	}
}

// Stop ends the probe and returns the overruns it recorded.
func (p *StallProbe) Stop() *Histogram {
	close(p.stop)
	<-p.done
	return &p.h
}

// SetStall fills StallP99us and StallMaxUs from a probe's histogram.
func (r *Result) SetStall(h *Histogram) {
	if h.Count() == 0 {
		return
	}
	r.StallP99us = us(h.ValueAtQuantile(0.99))
	r.StallMaxUs = us(h.Max())
}
