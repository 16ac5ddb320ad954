package broker

import (
	"errors"
	"strconv"
	"time"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/broker/tx"
	"github.com/metaqgo/metaq/protocol"
)

// Batch put (`mput`, protocol/batch.go, docs/protocol.md): the messages of
// one frame go to one partition with one store.AppendBatch, so they get
// consecutive queue offsets and share one group commit. The frame is
// refused as a whole (nothing stored) when any entry is bad. Delayed and
// transactional messages are not accepted in a batch: they are rewritten
// into system topics one by one (use put for them).

// batchBufs is the reader's scratch for mput, reused frame after frame
// (reader only). Bounded by protocol.MaxBatchCount entries (about 1 MiB),
// and sized from the entries the block can hold (the parser refuses a count
// beyond <len>/protocol.MinBatchEntry): a 27-byte frame announcing 10,000
// messages allocated the whole of it, kept for the life of the connection.
// A scratch of more than maxKeptBatchMsgs entries is dropped after a
// refused frame, and after a stored one when the connection goes quiet,
// with the large read buffer (readbuf.go).
type batchBufs struct {
	msgs []store.Message
}

// maxKeptBatchMsgs is the largest mput scratch a quiet connection keeps.
const maxKeptBatchMsgs = 256

// big reports whether the scratch is to be given back when the connection
// goes quiet.
func (b *batchBufs) big() bool { return cap(b.msgs) > maxKeptBatchMsgs }

// release drops a large scratch.
func (b *batchBufs) release() {
	if b.big() {
		b.msgs = nil
	}
}

func (c *conn) handleBatchPut(cmd *protocol.Command) {
	s := c.srv
	s.stats.cmdPut.Add(1)
	ts, perr := s.putTopic(cmd.Topic, cmd.Partition) // publish.go: the refusals every put path shares
	if perr != nil {
		c.failPut(nil, perr.Code, perr.Msg, cmd.Opaque)
		return
	}
	n := int(cmd.Count)
	sampled := s.sampleStart(ts.puts.Add(int64(n)))
	partition, perr := s.putPartition(ts, cmd.Partition)
	if perr != nil {
		c.failPut(ts, perr.Code, perr.Msg, cmd.Opaque)
		return
	}
	msgs, bytes, bad := c.splitBatch(ts, partition, cmd.Data, n)
	if bad != "" {
		c.failPut(ts, protocol.StatusBadRequest, s.putError(cmd.Topic, partition, bad), cmd.Opaque)
		return
	}
	var run store.RunResult
	flush, err := s.appendRun(msgs, &run)
	if err != nil {
		clear(msgs) // drop the references into the read buffer
		c.batch.release()
		code := protocol.StatusInternalServerError
		switch {
		case errors.Is(err, store.ErrMessageTooLarge), errors.Is(err, store.ErrBadTopic):
			code = protocol.StatusBadRequest
		case errors.Is(err, store.ErrClosed):
			code = protocol.StatusServiceUnavailable
		default:
			c.log.Error("batch append failed", "topic", ts.name, "partition", partition, "messages", n, "err", err)
		}
		c.failPut(ts, code, s.putError(cmd.Topic, partition, err.Error()), cmd.Opaque)
		return
	}
	ts.putBytes.Add(int64(bytes))
	c.rq.addBatchPut(flush, partition, &run, msgs, cmd.BatchRuns, cmd.Opaque)
	clear(msgs) // drop the references into the read buffer
	c.rq.replies[len(c.rq.replies)-1].t0 = sampled
	c.own.note(ts, partition, run.FirstOffset+int64(n-1), flush)
	if !ts.notified.Load() && ts.notified.CompareAndSwap(false, true) && s.opts.OnTopic != nil {
		go s.opts.OnTopic(ts.name, ts.settings.NumPartitions)
	}
}

// splitBatch parses an mput block into n store messages for partition
// (aliasing block). bad is the reason the frame is refused, "" when it is
// good; bytes counts the stored data. A refused frame leaves no large
// scratch behind.
func (c *conn) splitBatch(ts *topicState, partition int32, block []byte, n int) (msgs []store.Message, bytes int, bad string) {
	msgs, bytes, bad = c.splitBatchInto(ts, partition, block, n)
	if bad != "" {
		c.batch.release()
	}
	return msgs, bytes, bad
}

func (c *conn) splitBatchInto(ts *topicState, partition int32, block []byte, n int) (msgs []store.Message, bytes int, bad string) {
	if n > len(block)/protocol.MinBatchEntry { // the parser refuses it; the scratch must not follow a bogus count
		return nil, 0, strconv.Itoa(n) + " entries announced in " + strconv.Itoa(len(block)) + " bytes"
	}
	if cap(c.batch.msgs) < n {
		c.batch.msgs = make([]store.Message, n)
	}
	msgs = c.batch.msgs[:n]
	d := c.srv.opts.Delay
	var now int64
	rest := block
	for i := 0; i < n; i++ {
		flag, raw, r, err := protocol.NextBatchEntry(rest)
		if err != nil {
			clear(msgs[:i])
			return nil, 0, "entry " + strconv.Itoa(i+1) + " of " + strconv.Itoa(n) + ": " + err.Error()
		}
		rest = r
		props, data, flag, err := protocol.SplitProperties(flag, raw)
		if err != nil {
			clear(msgs[:i])
			return nil, 0, "entry " + strconv.Itoa(i+1) + ": " + err.Error()
		}
		if len(props) > 0 {
			if _, half := tx.HalfGroupRaw(props); half {
				clear(msgs[:i])
				return nil, 0, "entry " + strconv.Itoa(i+1) + ": transactional messages cannot be batched (use put)"
			}
			if d != nil {
				if now == 0 {
					now = time.Now().UnixMilli()
				}
				if _, yes, err := d.PlanFor(props, now); err != nil || yes {
					clear(msgs[:i])
					return nil, 0, "entry " + strconv.Itoa(i+1) + ": delayed messages cannot be batched (use put)"
				}
			}
		}
		msgs[i] = store.Message{Topic: ts.name, Partition: partition, Flag: flag, Properties: props, Data: data, SysFlag: c.traceMark}
		bytes += len(data)
	}
	if len(rest) != 0 {
		clear(msgs)
		return nil, 0, strconv.Itoa(len(rest)) + " bytes after the " + strconv.Itoa(n) + " entries the header announced"
	}
	return msgs, bytes, ""
}

// appendRun is store.AppendRun behind the broker's fault hook (faults.go).
func (s *Server) appendRun(msgs []store.Message, run *store.RunResult) (*store.Flush, error) {
	if f := s.appendFault.Load(); f != nil {
		if err := (*f)(msgs[0].Topic); err != nil {
			return nil, err
		}
	}
	return s.store.AppendRun(msgs, run)
}

// addBatchPut queues an mput's success reply, rendered now into the arena:
// `<partition> <firstOffset> <msgId>…`, or with runs (the compact form)
// `<partition> <firstOffset> <firstMsgId> <size>[x<n>]…` — a frame is one
// run of consecutive records, so each id is the previous one plus its
// record's size (protocol/batch.go); the sizes come from the stored msgs.
// The writer sends it once f, if any, succeeded; in async mode
// failUnflushedPuts may still turn it into a 500.
func (q *outQueue) addBatchPut(f *store.Flush, partition int32, run *store.RunResult, msgs []store.Message, runs bool, opaque int32) {
	start := len(q.arena)
	tl := len(msgs[0].Topic)
	if runs {
		q.arena = protocol.AppendBatchRunsStart(q.arena, partition, run.FirstOffset, run.FirstMsgID)
		size, n := protocol.RecordSize(tl, len(msgs[0].Properties), len(msgs[0].Data)), 1
		for i := 1; i < len(msgs); i++ {
			if sz := protocol.RecordSize(tl, len(msgs[i].Properties), len(msgs[i].Data)); sz != size {
				q.arena = protocol.AppendBatchRun(q.arena, size, n)
				size, n = sz, 1
				continue
			}
			n++
		}
		q.arena = protocol.AppendBatchRun(q.arena, size, n)
	} else {
		q.arena = protocol.AppendBatchResultStart(q.arena, partition, run.FirstOffset)
		id := run.FirstMsgID
		for i := range msgs {
			q.arena = protocol.AppendBatchResultID(q.arena, id)
			id += int64(protocol.RecordSize(tl, len(msgs[i].Properties), len(msgs[i].Data)))
		}
	}
	q.bytes += replyHeaderEstimate + len(q.arena) - start
	q.replies = append(q.replies, reply{kind: replyBatch, code: protocol.StatusSuccess, opaque: opaque,
		bodyStart: start, bodyEnd: len(q.arena), flush: f})
}
