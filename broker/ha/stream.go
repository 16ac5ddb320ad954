package ha

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/metaqgo/metaq/broker/store"
)

// The master's side of a link: one per connected slave, two goroutines as
// every connection has — the writer owns the socket's write side and
// streams the log from the slave's position (big reads of mapped segments,
// several chunks per writev, no per-message work), the reader takes the
// slave's acks.

const (
	readChunk  = 1 << 20 // bytes per ReadRaw
	writeBatch = 8 << 20 // bytes gathered per writev
)

// LinkRequest is the parsed `replicate` command.
type LinkRequest struct {
	BrokerID int
	SlaveID  int
	Position int64
	Epoch    int64
	Opaque   int32
}

type link struct {
	n    *Node
	nc   net.Conn
	r    *replica
	stop chan struct{}
	once sync.Once
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.stop)
		_ = l.nc.Close()
	})
}

// reply writes a text result (the handshake) on nc.
func reply(nc net.Conn, code int, body string, opaque int32) error {
	b := []byte("result " + strconv.Itoa(code) + " " + strconv.Itoa(len(body)) + " " +
		strconv.Itoa(int(opaque)) + "\r\n" + body)
	_ = nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := nc.Write(b)
	return err
}

// ServeLink serves a slave's `replicate` request on nc, which the broker
// hands over after reading the command (nothing else was sent on it). It
// answers the handshake, then streams until the link breaks or the node
// closes; it always closes nc. It does not block the caller's connection
// bookkeeping: call it in its own goroutine.
func (n *Node) ServeLink(nc net.Conn, req LinkRequest) {
	st := n.st
	fail := func(code int, msg string) {
		_ = reply(nc, code, msg, req.Opaque)
		_ = nc.Close()
	}
	switch {
	case req.BrokerID != n.cfg.BrokerID:
		fail(400, "this is broker "+strconv.Itoa(n.cfg.BrokerID)+", not "+strconv.Itoa(req.BrokerID))
		return
	case n.Role() != RoleMaster:
		code, msg := n.PutRefusal()
		fail(code, msg)
		return
	case req.Epoch > n.Epoch():
		// The slave follows a newer history: this master has been deposed.
		why := "a slave follows epoch " + strconv.FormatInt(req.Epoch, 10) + ", newer than this master's " +
			strconv.FormatInt(n.Epoch(), 10) + ": this master has been deposed"
		n.Fence(why)
		fail(503, why)
		return
	}
	if err := n.ensureEpoch(); err != nil {
		fail(503, err.Error())
		return
	}
	es, err := readEpochs(st)
	if err != nil {
		fail(503, "reading the epoch history: "+err.Error())
		return
	}
	end := epochEnd(es, req.Epoch, st.WrittenPos())
	if req.Position > end && end < st.MinPos() {
		// Where the slave's epoch ends here is below this log's oldest
		// segment: nothing retained can be compared with the slave's
		// bytes, and a slave cut there would be reset to the oldest
		// segment with no epoch of its own, and cut again. A slave reset
		// to this master's oldest segment (behind retention) is in this
		// case every time it links until it has received an epoch record.
		n.log.Warn("a slave's epoch ends below this master's oldest segment: its log cannot be checked against this one; it continues",
			"slave", req.SlaveID, "position", req.Position, "epoch", req.Epoch, "epochEnd", end, "oldestSegment", st.MinPos())
		end = req.Position
	}
	if req.Position > end {
		// The slave holds bytes this master never had in that epoch (or
		// more than it has at all): it must cut them first. This includes
		// a slave of a master whose machine crashed: a master ships what
		// it wrote before it is durable, and each start of a master opens
		// a new epoch where its recovered log ends (epoch.go).
		n.log.Warn("a slave's log goes past its epoch in this master's history; it must truncate",
			"slave", req.SlaveID, "position", req.Position, "epoch", req.Epoch, "epochEnd", end)
		fail(409, strconv.FormatInt(end, 10))
		return
	}
	start := req.Position
	if mp := st.MinPos(); start < mp {
		n.log.Warn("a slave is behind this master's retention: it restarts from the oldest segment",
			"slave", req.SlaveID, "position", req.Position, "oldestSegment", mp)
		start = mp
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		fail(503, "shutting down")
		return
	}
	r := n.replicas[req.SlaveID]
	if r == nil {
		r = &replica{id: req.SlaveID}
		r.acked.Store(-1)
		n.replicas[req.SlaveID] = r
	}
	l := &link{n: n, nc: nc, r: r, stop: make(chan struct{})}
	n.links[l] = struct{}{}
	old := r.attach(l)
	n.mu.Unlock()
	if old != nil {
		// The slave reconnected while its previous link still looks open
		// here (a half-open connection after a partition, or two slaves
		// configured with one slaveId): the newest link is the slave's.
		n.log.Warn("a new link of a slave replaces its previous one, which is closed", "slave", req.SlaveID,
			"remote", nc.RemoteAddr().String())
		old.close()
	}
	defer func() {
		n.mu.Lock()
		delete(n.links, l)
		n.mu.Unlock()
		if r.detach(l) {
			n.gate.kick()
		}
	}()
	// The fourth field says whether this master waits for durable acks
	// (syncReplicas > 0): without it the slave may gather its fsyncs
	// (follow.go, syncer).
	durableAcks := "0"
	if n.cfg.SyncReplicas > 0 {
		durableAcks = "1"
	}
	body := strconv.FormatInt(start, 10) + " " + strconv.FormatInt(st.SegmentSize(), 10) + " " +
		strconv.FormatInt(n.Epoch(), 10) + " " + durableAcks
	if err := reply(nc, 200, body, req.Opaque); err != nil {
		_ = nc.Close()
		return
	}
	addr := nc.RemoteAddr().String()
	// Not counted toward syncReplicas before its first ack on this link
	// (replica.confirmed): req.Position is what the slave says it holds.
	if !r.begin(l, addr, min(start, req.Position)) {
		_ = nc.Close() // a newer link of this slave replaced it meanwhile
		return
	}
	n.log.Info("slave connected", "slave", req.SlaveID, "remote", addr, "from", start)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer l.close()
		l.readAcks()
	}()
	err = l.stream(start)
	l.close()
	wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		n.log.Info("slave link closed", "slave", req.SlaveID, "err", err)
	} else {
		n.log.Info("slave link closed", "slave", req.SlaveID)
	}
}

// readAcks reads the slave's durable positions until the link breaks.
func (l *link) readAcks() {
	br := bufio.NewReaderSize(l.nc, 4096)
	var b [ackSize]byte
	idle := max(10*l.n.cfg.Heartbeat, 5*time.Second)
	for {
		_ = l.nc.SetReadDeadline(time.Now().Add(idle))
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return
		}
		pos, err := decodeAck(b[:])
		if err != nil {
			l.n.log.Warn("bad ack from a slave; closing its link", "slave", l.r.id, "err", err)
			return
		}
		if !l.r.noteAck(l, pos) {
			return // a newer link of this slave replaced this one
		}
		l.n.gate.kick()
	}
}

// asyncLinger: on a master that does not wait for its slaves
// (syncReplicas=0), after a send the stream lets the log grow this long
// before it reads again, instead of waking on every write-out of a producer
// connection: fewer, larger sends, and as many fewer wake-ups of the
// stream here and of the slave's receiver, write-out, dispatcher and
// syncer there (docs/replication.md, "Benchmarks"). The first record
// after an idle spell is sent at once; a send of a full batch (catching up)
// does not linger. Replication lags by at most this much more.
var asyncLinger = 5 * time.Millisecond

// commitLinger: a high watermark that moved while nothing was left to send
// waits this long for the next data send to carry it (in the same writev),
// before a heartbeat carries it alone: in sync-flush mode a round's
// watermark moves after its fsync (and its slaves' acks), and the next round
// is usually shipped within a millisecond or two, so one write per round
// instead of two on the master and one read instead of two on the slave.
// Reads on a slave lag by at most this much more.
var commitLinger = 2 * time.Millisecond

// stream sends the log from pos until stopped.
func (l *link) stream(pos int64) error {
	st := l.n.st
	hb := time.NewTimer(l.n.cfg.Heartbeat)
	defer hb.Stop()
	var linger *time.Timer
	if l.n.cfg.SyncReplicas == 0 && asyncLinger > 0 {
		linger = time.NewTimer(time.Hour)
		linger.Stop()
		defer linger.Stop()
	}
	commitT := time.NewTimer(time.Hour)
	commitT.Stop() // Go ≥ 1.23: a stopped timer's channel holds no stale tick
	defer commitT.Stop()
	lingering := false // commitT runs: a moved high watermark waits for a data send
	var (
		hdrs   []byte
		chunks []store.RawChunk
		iov    net.Buffers
		commit [frameHeaderSize]byte
		// sent is the high watermark last sent (commit.go): a heartbeat
		// frame carries it after every send that moves it, and on its own
		// when it moves while nothing is left to send.
		sent int64 = -1
		// since: the earliest moment the bytes of the next gather may have
		// been written: the previous gather (they came after it), or the
		// wake-up that announced them. A send is marked with it, so that
		// the lag (replica.lag) counts from the write, linger included,
		// not from the send.
		since = time.Now()
	)
	release := func() {
		for i := range chunks {
			chunks[i].Release()
		}
		chunks = chunks[:0]
	}
	defer release()
	for {
		// Gather what is written, up to writeBatch bytes.
		gathered := time.Now()
		hdrs = hdrs[:0]
		size := 0
		for size < writeBatch {
			c, ok, err := st.ReadRawWritten(pos, readChunk)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			chunks = append(chunks, c)
			pos = c.Next
			size += len(c.Buf)
		}
		now := time.Now()
		if len(chunks) > 0 {
			end := st.WrittenPos()
			iov = iov[:0]
			// One header per chunk, in one buffer reused from send to send
			// (iov points into it until WriteTo returns; it must not grow
			// while headers are being added).
			if need := frameHeaderSize * len(chunks); cap(hdrs) < need {
				hdrs = make([]byte, 0, need)
			}
			for i := range chunks {
				c := &chunks[i]
				off := len(hdrs)
				hdrs = hdrs[:off+frameHeaderSize]
				putFrameHeader(hdrs[off:], frameHeader{kind: frameData, n: len(c.Buf), pos: c.Pos, end: max(end, c.Pos+int64(len(c.Buf))), time: now.UnixMilli()})
				iov = append(iov, hdrs[off:off+frameHeaderSize], c.Buf)
			}
			// The high watermark, read after the gather (async flush: it
			// is the written end, so it covers all of it), capped at what
			// is sent.
			if c := min(l.n.committedPos(), pos); c > sent {
				putFrameHeader(commit[:], frameHeader{kind: frameHeartbeat, pos: c, end: max(end, pos), time: now.UnixMilli()})
				iov = append(iov, commit[:])
				sent = c
			}
			if lingering {
				// This send carries the high watermark the timer waited for.
				commitT.Stop()
				lingering = false
			}
			_ = l.nc.SetWriteDeadline(now.Add(max(10*l.n.cfg.Heartbeat, 10*time.Second)))
			l.r.noteSent(l, pos, since)
			since = gathered
			// WriteTo consumes the Buffers it is called on: call it on a
			// copy, so that iov keeps its backing array for the next send.
			w := iov
			if _, err := w.WriteTo(l.nc); err != nil {
				return err
			}
			release()
			if !hb.Stop() {
				select {
				case <-hb.C:
				default:
				}
			}
			hb.Reset(l.n.cfg.Heartbeat)
			if linger != nil && size < writeBatch {
				linger.Reset(asyncLinger)
				select {
				case <-l.stop:
					return nil
				case <-linger.C:
				}
			}
			continue
		}
		since = gathered // nothing new: what comes next is written after it
		beat := false
		var moved <-chan struct{}
		if !lingering {
			moved = l.n.waitCommitted(sent)
		}
		select {
		case <-l.stop:
			return nil
		case <-st.WaitWritten(pos):
			since = time.Now() // what it announced was written just now
		case <-moved:
			// It moved while nothing is to be sent: the next data send
			// (the next round, in sync-flush mode usually within a
			// millisecond or two) carries it in its writev, else the
			// timer sends it alone.
			commitT.Reset(commitLinger)
			lingering = true
		case <-commitT.C:
			lingering = false
			beat = true
		case <-hb.C:
			beat = true
			hb.Reset(l.n.cfg.Heartbeat)
		}
		if beat {
			// The high watermark moved (or the link is idle): a heartbeat
			// with it (never past what was sent: pos).
			c := max(min(l.n.committedPos(), pos), sent)
			putFrameHeader(commit[:], frameHeader{kind: frameHeartbeat, pos: c, end: max(st.WrittenPos(), pos), time: time.Now().UnixMilli()})
			_ = l.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := l.nc.Write(commit[:]); err != nil {
				return err
			}
			sent = c
		}
	}
}

// HandOff serves the link on nc in a goroutine the node waits for at Close.
func (n *Node) HandOff(nc net.Conn, req LinkRequest) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		_ = reply(nc, 503, "shutting down", req.Opaque)
		_ = nc.Close()
		return
	}
	n.wg.Add(1)
	n.mu.Unlock()
	go func() {
		defer n.wg.Done()
		n.ServeLink(nc, req)
	}()
}
