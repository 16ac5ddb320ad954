package broker

// Inline replies: the reader writes its own replies when the write side is
// free.
//
// A request and its reply used to cross two goroutines in the broker: the
// reader parsed and handled the request, queued the reply and woke the
// writer, which rendered and wrote it. That hand-off is one extra goroutine
// wake-up per batch of commands read (and, on an otherwise idle machine, a
// futex wake of another OS thread that spins looking for work and finds
// none), and the reply waited behind the reader's next read — the one that
// returns EAGAIN before the reader parks and the writer can run. As in
// nats-server, whose reader flushes its client's outbound buffer at the end
// of each read, the reader now renders and writes the replies of what it
// just read itself when nothing else is queued or being written:
//
//   - the writer goroutine stays for everything else: replies queued by
//     parked gets, pops and transaction checks, a reader that finds the
//     write side busy (its replies are queued behind the others, in order),
//     and replies that must wait for a group commit (sync flush: the reader
//     never blocks on an fdatasync; it goes on reading the next batch);
//   - large replies (a get's records, more than inlineMaxBytes) go to the
//     writer too, so a consumer's pipelined gets keep their read/write
//     overlap;
//   - conn.writing (under conn.mu) makes the two exclusive; whichever clears
//     it signals the writer when replies were queued meanwhile, so nothing
//     queued is left behind and replies stay in request order.
//
// A parked get is answered by the goroutine that made its record readable,
// with one non-blocking write when the write side is free and nothing is
// queued (longpoll.go).
//
// A reader blocked in an inline write stops reading that connection: the
// same backpressure as the reply queue's high-water mark, reached sooner,
// bounded by writeTimeout like the writer's writes.

// inlineMaxBytes bounds the replies the reader writes itself.
const inlineMaxBytes = 64 << 10

// flushesDone reports whether no reply of q waits for a group commit.
func flushesDone(q *outQueue) bool {
	for i := range q.replies {
		if f := q.replies[i].flush; f != nil {
			select {
			case <-f.Done():
			default:
				return false
			}
		}
	}
	return true
}

// inlineLocked reports whether the reader may write c.rq itself (c.mu held):
// the write side is free, nothing is queued before it, it is small, and no
// reply waits for a group commit that has not completed.
func (c *conn) inlineLocked() bool {
	if c.writing || len(c.out.replies) != 0 || c.rq.bytes > inlineMaxBytes || c.readerDone || !flushesDone(&c.rq) {
		return false
	}
	c.writing = true
	return true
}

// writeInline writes q (c.rq from the reader); it
// is called with c.mu held and c.writing set, and returns with c.mu
// released.
func (c *conn) writeInline(q *outQueue) {
	c.mu.Unlock()
	err := c.w.writeQueue(q)
	q.releaseAll()
	c.finishInline(err)
}

// finishInline gives the write side back after an inline write.
func (c *conn) finishInline(err error) {
	c.mu.Lock()
	c.writing = false
	more := len(c.out.replies) > 0
	c.mu.Unlock()
	if err != nil {
		c.closeWithError(err)
		return
	}
	if more {
		c.signalWriter()
	}
}
