package httpapi

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/pop"
	"github.com/metaqgo/metaq/protocol"
)

// fakePop is an in-memory pop.Service for the gateway's unit tests: one
// topic, one partition, messages by offset. The real service is tested in
// broker/pop and, behind the gateway, by the real-broker tests.
type fakePop struct {
	t     testing.TB
	topic string

	mu      sync.Mutex
	msgs    []*fakeMsg
	wake    chan struct{} // closed and replaced on every change
	closed  bool
	acked   int
	rejects int
	// The flow-control invariant, checked at every Receive: what the
	// gateway holds never exceeds its K (maxHeld, set by the test).
	maxHeld int
	holding map[string]bool
	ops     []string // "ack h", "release h 0", … in order
	// receiveErr, when set, is what every Receive answers.
	receiveErr error
}

type fakeMsg struct {
	off     int64
	attempt int
	done    bool
	until   time.Time // invisible until (in flight or released with a delay)
	handle  string    // current delivery
	rec     []byte
	tag     string
}

func newFakePop(t testing.TB, topic string) *fakePop {
	return &fakePop{t: t, topic: topic, wake: make(chan struct{}), holding: map[string]bool{}}
}

func fakeRecord(topic string, off int64, props, body string, flag int32) []byte {
	r := protocol.Record{MsgID: 1<<48 | off*100, Flag: flag, QueueOffset: off, StoreTime: 1700000000000 + off,
		BornTime: 1700000000000, Topic: []byte(topic), Properties: []byte(props), Data: []byte(body)}
	b := make([]byte, protocol.RecordSize(len(r.Topic), len(r.Properties), len(r.Data)))
	protocol.EncodeRecord(b, &r)
	return b
}

// add appends messages with the given bodies (tag "t<offset%2>").
func (f *fakePop) add(bodies ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, body := range bodies {
		off := int64(len(f.msgs))
		tag := "t" + strconv.Itoa(int(off%2))
		f.msgs = append(f.msgs, &fakeMsg{off: off, tag: tag,
			rec: fakeRecord(f.topic, off, "tag="+tag+"&keys=k"+strconv.Itoa(int(off))+"%20x&color=blue", body, 0)})
	}
	f.changedLocked()
}

func (f *fakePop) addRecord(rec []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, &fakeMsg{off: int64(len(f.msgs)), rec: rec})
	f.changedLocked()
}

func (f *fakePop) changedLocked() {
	close(f.wake)
	f.wake = make(chan struct{})
}

func (f *fakePop) close() {
	f.mu.Lock()
	f.closed = true
	f.changedLocked()
	f.mu.Unlock()
}

func (f *fakePop) Receive(ctx context.Context, group, topic string, filter pop.Filter, max int, invisible time.Duration) ([]pop.Delivery, error) {
	if topic != f.topic {
		return nil, pop.ErrUnknownTopic
	}
	if max < 1 || max > pop.MaxReceive {
		f.t.Errorf("Receive max %d", max)
	}
	if f.receiveErr != nil {
		return nil, f.receiveErr
	}
	for {
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			return nil, pop.ErrClosed
		}
		now := time.Now()
		// Drop what the gateway may no longer hold (timed out).
		for _, m := range f.msgs {
			if !m.done && m.handle != "" && !m.until.After(now) {
				delete(f.holding, m.handle)
			}
		}
		if f.maxHeld > 0 && len(f.holding)+max > f.maxHeld {
			f.t.Errorf("flow control: the gateway holds %d and asks for %d more, K = %d", len(f.holding), max, f.maxHeld)
		}
		var out []pop.Delivery
		var next time.Time
		for _, m := range f.msgs {
			if len(out) == max {
				break
			}
			if m.done || (filter != nil && !filter.MatchTag(m.tag)) {
				continue
			}
			if m.until.After(now) {
				if next.IsZero() || m.until.Before(next) {
					next = m.until
				}
				continue
			}
			m.attempt++
			m.handle = fmt.Sprintf("%s:0:%d:%d", f.topic, m.off, m.attempt)
			m.until = now.Add(invisible)
			f.holding[m.handle] = true
			out = append(out, pop.Delivery{Handle: m.handle, Topic: f.topic, Partition: 0, QueueOffset: m.off,
				MsgID: 1<<48 | m.off*100, Attempt: m.attempt, Record: append([]byte(nil), m.rec...)})
		}
		wake := f.wake
		f.mu.Unlock()
		if len(out) > 0 {
			return out, nil
		}
		var timer <-chan time.Time
		if !next.IsZero() {
			t := time.NewTimer(time.Until(next))
			defer t.Stop()
			timer = t.C
		}
		select {
		case <-wake:
		case <-timer:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// current finds the message whose current delivery is handle.
func (f *fakePop) currentLocked(handle string) (*fakeMsg, error) {
	parts := strings.Split(handle, ":")
	if len(parts) != 4 {
		return nil, pop.ErrBadHandle
	}
	off, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || off < 0 {
		return nil, pop.ErrBadHandle
	}
	if off >= int64(len(f.msgs)) {
		return nil, pop.ErrStale
	}
	m := f.msgs[off]
	if m.done || m.handle != handle || !m.until.After(time.Now()) {
		return nil, pop.ErrStale
	}
	return m, nil
}

func (f *fakePop) op(kind, group, handle string, fn func(m *fakeMsg)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops = append(f.ops, kind+" "+handle)
	m, err := f.currentLocked(handle)
	if err != nil {
		return err
	}
	delete(f.holding, handle)
	fn(m)
	f.changedLocked()
	return nil
}

func (f *fakePop) Ack(group, handle string) error {
	return f.op("ack", group, handle, func(m *fakeMsg) { m.done = true; f.acked++ })
}

func (f *fakePop) Release(group, handle string, delay time.Duration) error {
	return f.op("release", group, handle, func(m *fakeMsg) { m.until = time.Now().Add(delay); m.handle = "" })
}

func (f *fakePop) Reject(group, handle string) error {
	return f.op("reject", group, handle, func(m *fakeMsg) { m.done = true; f.rejects++ })
}

func (f *fakePop) Extend(group, handle string, invisible time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops = append(f.ops, "extend "+handle)
	m, err := f.currentLocked(handle)
	if err != nil {
		return err
	}
	m.until = time.Now().Add(invisible)
	return nil
}

func (f *fakePop) stats() (acked, rejects int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.acked, f.rejects
}
