package broker

import (
	"time"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

// park holds a get that found nothing until a record arrives on its
// partition, its deadline passes, or the connection stops reading. The wait
// is a channel the store closes when the partition's index grows, so parked
// gets cost no CPU until something happens; each one is a small goroutine
// blocked in select.
func (c *conn) park(g getReq, maxWaitMs int64) {
	c.handOffReplies() // a parked get may be answered at once (another connection's put)
	s := c.srv
	s.stats.longPolls.Add(1)
	c.parked.Add(1)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		timer := time.NewTimer(time.Duration(maxWaitMs) * time.Millisecond)
		defer timer.Stop()
		for {
			ready := s.store.Wait(g.ts.name, g.partition, g.offset)
			select {
			case <-ready:
				res, err := s.store.Read(g.ts.name, g.partition, g.offset, g.maxBytes, g.filter)
				if err == nil && res.Status == store.ReadNoMessage {
					res.Release() // woken for a record not yet readable: wait again
					continue
				}
				c.enqueueParked(func(q *outQueue) { s.readReply(q, &g, res, err) })
			case <-timer.C:
				c.notFound(&g)
			case <-c.stop:
				c.notFound(&g)
			case <-c.dead:
			}
			break
		}
		c.parkedDone()
	}()
}

// parkedDone ends a parked get after its reply was queued or written. The
// writer needs a wake-up only when the reader has stopped (it closes the
// connection once nothing is parked or queued; see idleAfterReader):
// otherwise the reply's own signal, or the inline write, was enough.
func (c *conn) parkedDone() {
	c.parked.Add(-1)
	c.mu.Lock()
	done := c.readerDone
	c.mu.Unlock()
	if done {
		c.signalWriter()
	}
}

func (c *conn) notFound(g *getReq) {
	c.srv.stats.getMiss.Add(1)
	g.ts.getMiss.Add(1)
	c.enqueue(func(q *outQueue) {
		q.addResultString(protocol.StatusNotFound, "Could not find message at position "+itoa(g.offset), g.opaque)
	})
}
