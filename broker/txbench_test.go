package broker_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
)

// Transaction benchmarks over TCP against a sync-flush (durable) broker:
// txBenchConns connections each run units in a closed loop (a unit waits
// for its replies before the next), so the group commit batches what the
// connections have in flight. Compare in the same run:
//
//	go test -run '^$' -bench 'BenchmarkTx$' -benchtime 2s -count 3 ./broker/
//
// units/s of HalfCommit and HalfCommitOverlap against PlainPut (target ≥
// 0.4×: a half message and its commit are two durable appends; two round
// trips, or one when the commit rides with the next message), and tx/s of
// Local10 (BEGIN + 10 puts + COMMIT_ONE_PHASE, pipelined, one round trip).

const txBenchConns = 32

type benchConn struct {
	nc  net.Conn
	w   *bufio.Writer
	rr  *protocol.ReplyReader
	id  int
	seq int
	buf []byte
	end int64 // halfCommitOverlap: the half message whose txend goes with the next put
}

func (c *benchConn) reply() (protocol.Reply, error) {
	r, err := c.rr.Next()
	if err == nil && r.Code != 200 {
		err = fmt.Errorf("reply %d %q", r.Code, r.Body)
	}
	return r, err
}

// BenchmarkTx runs the three workloads against a sync-flush broker (every
// unit durable) and an async one (unflushThreshold=1000), interleaved.
func BenchmarkTx(b *testing.B) {
	for _, mode := range []string{"sync", "async"} {
		for _, w := range []struct {
			name string
			unit func(*benchConn) error
		}{{"PlainPut", plainPut}, {"HalfCommit", halfCommit}, {"HalfCommitOverlap", halfCommitOverlap}, {"Local10", local10}} {
			b.Run(mode+"/"+w.name, func(b *testing.B) { benchUnits(b, mode == "sync", w.unit) })
		}
	}
}

func benchUnits(b *testing.B, syncFlush bool, unit func(c *benchConn) error) {
	br := brokertest.RunBroker(b, brokertest.Options{Sync: syncFlush, SegSize: 512 << 20, Topics: map[string]int{"test": 8}})
	conns := make([]*benchConn, txBenchConns)
	for i := range conns {
		nc, err := net.Dial("tcp", br.Addr)
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		conns[i] = &benchConn{nc: nc, w: bufio.NewWriterSize(nc, 64<<10), rr: protocol.NewReplyReader(bufio.NewReaderSize(nc, 64<<10), 1<<20), id: i}
	}
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	var firstErr atomic.Value
	b.ReportAllocs()
	b.ResetTimer()
	for _, c := range conns {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := unit(c); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if err, _ := firstErr.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "units/s")
}

var benchBody = make([]byte, 100)

// plainPut: one put, answered.
func plainPut(c *benchConn) error {
	{
		c.buf = protocol.AppendPut(c.buf[:0], "test", int32(c.id%8), 0, protocol.ChecksumNone, "", 1, benchBody)
		c.w.Write(c.buf)
		if err := c.w.Flush(); err != nil {
			return err
		}
		_, err := c.reply()
		return err
	}
}

var halfData = append([]byte("tx=half&pgroup=bench\n"), benchBody...)

// halfCommit: a half message, then txend commit.
func halfCommit(c *benchConn) error {
	{
		c.buf = protocol.AppendPut(c.buf[:0], "test", int32(c.id%8), protocol.FlagHasProperties, protocol.ChecksumNone, "", 1, halfData)
		c.w.Write(c.buf)
		if err := c.w.Flush(); err != nil {
			return err
		}
		r, err := c.reply()
		if err != nil {
			return err
		}
		id, _, off, err := protocol.ParsePutResult(r.Body)
		if err != nil || off != -1 {
			return errors.New("half put result " + string(r.Body))
		}
		c.buf = protocol.AppendTxEnd(c.buf[:0], id, "commit", 2)
		c.w.Write(c.buf)
		if err := c.w.Flush(); err != nil {
			return err
		}
		_, err = c.reply()
		return err
	}
}

// halfCommitOverlap: as halfCommit, but the txend of a message is sent in
// the same write as the next half message and its reply read with that
// one's (RocketMQ sends END_TRANSACTION one-way): one round trip per
// message, still two durable appends, every reply checked.
func halfCommitOverlap(c *benchConn) error {
	c.buf = c.buf[:0]
	if c.end != 0 {
		c.buf = protocol.AppendTxEnd(c.buf, c.end, "commit", 2)
	}
	c.buf = protocol.AppendPut(c.buf, "test", int32(c.id%8), protocol.FlagHasProperties, protocol.ChecksumNone, "", 1, halfData)
	c.w.Write(c.buf)
	if err := c.w.Flush(); err != nil {
		return err
	}
	if c.end != 0 {
		if _, err := c.reply(); err != nil {
			return err
		}
	}
	r, err := c.reply()
	if err != nil {
		return err
	}
	id, _, off, err := protocol.ParsePutResult(r.Body)
	if err != nil || off != -1 {
		return errors.New("half put result " + string(r.Body))
	}
	c.end = id
	return nil
}

// local10: BEGIN, 10 transactional puts, COMMIT_ONE_PHASE, pipelined; the
// unit ends when the commit is answered.
func local10(c *benchConn) error {
	{
		c.seq++
		sid := "bench-" + strconv.Itoa(c.id)
		key := "TX:" + sid + ":" + strconv.Itoa(c.seq)
		c.buf = protocol.AppendTransaction(c.buf[:0], key, sid, "BEGIN", 0, "", 1)
		for i := 0; i < 10; i++ {
			c.buf = protocol.AppendPut(c.buf, "test", int32(c.id%8), 0, protocol.ChecksumNone, key, 2, benchBody)
		}
		c.buf = protocol.AppendTransaction(c.buf, key, sid, "COMMIT_ONE_PHASE", 0, "", 3)
		c.w.Write(c.buf)
		if err := c.w.Flush(); err != nil {
			return err
		}
		for i := 0; i < 12; i++ {
			if _, err := c.reply(); err != nil {
				return err
			}
		}
		return nil
	}
}
