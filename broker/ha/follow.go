package ha

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

// follower is a slave's side of the link: it connects to the master, asks
// for the log from its own durable position (its whole log, once synced), appends what arrives at the same
// physical offsets, makes each batch durable with one fdatasync (all the
// frames one read returned) and reports the durable position — group commit
// across the network. It reconnects by itself (backoff up to 2 s).
type follower struct {
	n    *Node
	addr string // "" = cfg.FindMaster

	stopc chan struct{}
	once  sync.Once
	done  chan struct{}

	mu sync.Mutex // leaf: nc
	nc net.Conn

	up         atomic.Bool
	masterEnd  atomic.Int64
	caughtUp   atomic.Int64 // unix ns of the last moment durable >= the master's end
	masterAddr atomic.Pointer[string]
}

func newFollower(n *Node, addr string) *follower {
	f := &follower{n: n, addr: addr, stopc: make(chan struct{}), done: make(chan struct{})}
	if addr != "" {
		f.masterAddr.Store(&addr)
	}
	return f
}

// stop ends the follower and waits for it.
func (f *follower) stop() {
	f.once.Do(func() {
		close(f.stopc)
		f.mu.Lock()
		if f.nc != nil {
			_ = f.nc.Close()
		}
		f.mu.Unlock()
	})
	<-f.done
}

func (f *follower) stopped() bool {
	select {
	case <-f.stopc:
		return true
	default:
		return false
	}
}

func (f *follower) connected() bool { return f.up.Load() }

func (f *follower) inSync() bool {
	if !f.up.Load() {
		return false
	}
	if f.n.st.FlushedPos() >= f.masterEnd.Load() {
		return true
	}
	return time.Since(time.Unix(0, f.caughtUp.Load())) <= f.n.cfg.MaxDelay
}

func (f *follower) info() FollowerInfo {
	fi := FollowerInfo{Connected: f.up.Load(), Durable: f.n.st.FlushedPos(), MasterEnd: f.masterEnd.Load()}
	if a := f.masterAddr.Load(); a != nil {
		fi.Master = *a
	}
	fi.InSync = f.inSync()
	fi.LagBytes = max(fi.MasterEnd-fi.Durable, 0)
	if fi.LagBytes > 0 && f.caughtUp.Load() > 0 {
		fi.Lag = time.Since(time.Unix(0, f.caughtUp.Load()))
	}
	return fi
}

// errRestart: a reset marker was written; only reopening the store helps.
var errRestart = errors.New("ha: the store must be reopened")

func (f *follower) run() {
	defer close(f.done)
	backoff := 100 * time.Millisecond
	for !f.stopped() {
		err := f.session()
		f.up.Store(false)
		if errors.Is(err, errRestart) {
			return
		}
		if f.stopped() {
			return
		}
		if err != nil {
			f.n.log.Info("replication link down; reconnecting", "master", f.currentMaster(), "err", err, "retryIn", backoff)
		}
		select {
		case <-f.stopc:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
		if err == nil {
			backoff = 100 * time.Millisecond
		}
	}
}

func (f *follower) currentMaster() string {
	if a := f.masterAddr.Load(); a != nil {
		return *a
	}
	return ""
}

// resolve finds the master's address.
func (f *follower) resolve() (string, error) {
	if f.addr != "" {
		return f.addr, nil
	}
	if f.n.cfg.FindMaster == nil {
		return "", errors.New("no master known: set [replication] masterAddr or enable ZooKeeper")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := f.n.cfg.FindMaster(ctx)
	if err != nil {
		return "", err
	}
	if a == "" {
		return "", errors.New("no master registered in ZooKeeper")
	}
	f.masterAddr.Store(&a)
	f.n.master.Store(&a)
	return a, nil
}

// session runs one connection to the master.
func (f *follower) session() error {
	addr, err := f.resolve()
	if err != nil {
		return err
	}
	var nc net.Conn
	if dial := f.n.cfg.Dial; dial != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		nc, err = dial(ctx, addr)
		cancel()
	} else {
		nc, err = dialer.Dial("tcp", addr)
	}
	if err != nil {
		return err
	}
	f.mu.Lock()
	if f.stopped() {
		f.mu.Unlock()
		nc.Close()
		return nil
	}
	f.nc = nc
	f.mu.Unlock()
	defer nc.Close()
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		_ = tc.SetReadBuffer(4 << 20)
	}
	st := f.n.st
	// The handshake's position is where this log is durable: the master
	// streams from it, and a gate counts what it has never confirmed by no
	// ack. SyncRaw makes what the last session appended durable, and fails
	// with the store's sticky error after a failed write or fdatasync
	// (appends are refused until the store is reopened): no link then.
	pos, err := st.SyncRaw()
	if err != nil {
		return fmt.Errorf("this log cannot be made durable; no link to the master until the store is reopened: %w", err)
	}
	if w := st.WritePos(); w != pos {
		return fmt.Errorf("this log is durable up to %d, written up to %d", pos, w)
	}
	epoch, err := lastEpoch(st)
	if err != nil {
		return err
	}
	n := f.n
	line := fmt.Sprintf("replicate %d %d %d %d 1\r\n", n.cfg.BrokerID, n.demotedK, pos, epoch)
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write([]byte(line)); err != nil {
		return err
	}
	br := bufio.NewReaderSize(nc, 64<<10)
	code, body, err := readResult(br)
	if err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	switch code {
	case 200:
	case 409:
		end, perr := strconv.ParseInt(strings.TrimSpace(body), 10, 64)
		if perr != nil || end < 0 {
			return fmt.Errorf("handshake: bad 409 %q", body)
		}
		return f.reset(store.ResetTruncate, end,
			"this log goes past the end of its last epoch in the master's history")
	default:
		return fmt.Errorf("master %s refused: %d %s", addr, code, body)
	}
	var start, segSize int64
	var mEpoch int64
	if _, err := fmt.Sscan(body, &start, &segSize, &mEpoch); err != nil {
		return fmt.Errorf("handshake: bad reply %q", body)
	}
	// A fourth field "0": the master does not wait for durable acks
	// (syncReplicas=0), so fsyncs may be gathered. Absent (an older master)
	// or anything else: ack every batch as soon as it is durable.
	durableAcks := true
	if fs := strings.Fields(body); len(fs) >= 4 && fs[3] == "0" {
		durableAcks = false
	}
	if segSize != st.SegmentSize() {
		return fmt.Errorf("the master's maxSegmentSize is %d, this broker's %d: they must be equal", segSize, st.SegmentSize())
	}
	if mEpoch > n.epoch.Load() {
		n.epoch.Store(mEpoch)
	}
	if start > pos {
		if st.WritePos() == st.MinPos() {
			return f.reset(store.ResetWipe, start, "this slave is behind the master's retention (empty log)")
		}
		return f.reset(store.ResetWipe, start, "this slave is behind the master's retention")
	}
	if start != pos {
		return fmt.Errorf("handshake: the master starts at %d, this log ends at %d", start, pos)
	}
	_ = nc.SetDeadline(time.Time{})
	f.up.Store(true)
	n.log.Info("following the master", "master", addr, "from", pos, "epoch", mEpoch)
	return f.stream(nc, br, pos, durableAcks)
}

// reset writes a reset marker and asks the broker to reopen the store.
func (f *follower) reset(kind store.ResetKind, pos int64, why string) error {
	st := f.n.st
	f.n.log.Warn("replication: the store must be reopened to follow the master", "why", why, "action", string(kind),
		"at", pos, "writePosition", st.WritePos())
	if err := store.ScheduleReset(f.n.cfg.Store.Dir(), kind, pos); err != nil {
		return err
	}
	if f.n.cfg.Restart != nil {
		f.n.cfg.Restart(why)
	} else {
		f.n.log.Error("replication stopped: restart the broker to apply the reset")
	}
	return errRestart
}

// stream appends frames until the link breaks. The receive loop appends
// what each read returned (store.AppendRaw) and writes it out to the page
// cache (readable on this node and safe from a crash of this process); the
// syncer (below) makes it durable and acks, in its own goroutine, so
// receiving goes on while an fdatasync runs.
func (f *follower) stream(nc net.Conn, br *bufio.Reader, pos int64, durableAcks bool) (err error) {
	st := f.n.st
	sy := newSyncer(f, nc, durableAcks)
	go sy.run()
	defer func() {
		if serr := sy.stop(); serr != nil {
			err = serr // the link was closed because of it
		}
		// What arrived is durable before anyone compares positions (the
		// election, a reconnect's handshake).
		if _, serr := st.SyncRaw(); serr != nil && err == nil {
			err = serr
		}
	}()
	buf := make([]byte, 8<<20)
	// Bytes already buffered by the handshake's reader come first.
	have := 0
	if k := br.Buffered(); k > 0 {
		b, _ := br.Peek(k)
		have = copy(buf, b)
	}
	idle := max(10*f.n.cfg.Heartbeat, 5*time.Second)
	fr := frameReader{}
	commit := int64(-1) // the master's high watermark as last heard
	// The runs this read appended, still in buf: what becomes readable is
	// indexed from them (store.RaiseReadLimitFrom), before buf is reused.
	var spans []store.RawSpan
	for {
		if have == 0 || !complete(buf[:have]) {
			_ = nc.SetReadDeadline(time.Now().Add(idle))
			k, err := nc.Read(buf[have:])
			have += k
			if err != nil && k == 0 {
				if errors.Is(err, io.EOF) {
					return errors.New("the master closed the link")
				}
				return err
			}
		}
		fr.buf = buf[:have]
		appended, beat := false, false
		spans = spans[:0]
		for {
			h, payload, ok, err := fr.next()
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			f.masterEnd.Store(h.end)
			if h.kind == frameHeartbeat {
				// pos: what the master has acknowledged; reads here stop
				// below it (commit.go). Everything before this frame is
				// appended already.
				commit = max(commit, min(h.pos, pos))
				beat = true
				continue
			}
			if h.pos != pos {
				return fmt.Errorf("the master sent %d, this log is at %d", h.pos, pos)
			}
			if err := st.AppendRaw(h.pos, payload); err != nil {
				return err
			}
			pos = h.pos + int64(len(payload))
			if len(payload) == protocol.BlankMinSize && isBlank(payload) {
				pos = st.WritePos() // rolled: the next segment's base
			} else {
				spans = append(spans, store.RawSpan{Pos: h.pos, Buf: payload})
			}
			appended = true
		}
		if appended {
			if err := st.WriteOut(); err != nil {
				return err
			}
		}
		st.RaiseReadLimitFrom(commit, spans) // saves a new limit first (store/watermark.go)
		clear(spans)                         // drop the references into buf
		// Keep the partial frame at the start of the buffer.
		rest := len(fr.buf)
		copy(buf, fr.buf)
		have = rest
		if need := partialNeed(buf[:have]); need > len(buf) {
			nb := make([]byte, need)
			copy(nb, buf[:have])
			buf = nb
		}
		if appended || beat {
			// A read that only brought part of a frame (a send larger than
			// one read returns: a 176 KB round sometimes comes in three)
			// gives the syncer nothing to sync or report: it used to wake
			// it anyway, for an ack of the same position and a gate check
			// on the master.
			sy.kick()
		}
	}
}

// asyncSyncEvery is how often a slave of a master that does not wait for
// durable acks (syncReplicas=0) makes what it received durable while data
// keeps arriving: one fdatasync per interval instead of one per socket read
// (docs/replication.md, "Benchmarks": the fdatasyncs were the largest
// item of the slave's CPU). What it holds is in the page cache meanwhile
// (it survives a crash of the slave's process, not of its machine), and it
// is synced at once when the link ends. Its acks, lag figures and published
// position lag by at most this much more: the master's lag figure is spread
// between the fdatasync's duration and this interval plus it (its p99 is
// about this + the fdatasync + the master's linger; docs/replication.md,
// "The slave's lag"). 50 ms gave a quiet p99 of 54–59 ms; 20 ms costs the
// same CPU per message (the writeback of the bytes dominates).
var asyncSyncEvery = 20 * time.Millisecond

// syncer makes a follower's appended bytes durable (store.SyncRaw: one
// write-out and one fdatasync for everything appended so far) and acks the
// durable position to the master: at once after every batch when the master
// waits for durable acks, at most every asyncSyncEvery otherwise. It owns
// the link's write side. The receive loop kicks it after every read that
// appended records or brought a heartbeat (whose ack keeps the master's read
// side alive).
type syncer struct {
	f           *follower
	nc          net.Conn
	durableAcks bool
	wake        chan struct{}
	quit        chan struct{}
	done        chan struct{}
	err         error // set before done is closed
}

func newSyncer(f *follower, nc net.Conn, durableAcks bool) *syncer {
	return &syncer{f: f, nc: nc, durableAcks: durableAcks,
		wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
}

func (s *syncer) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// stop ends the syncer and returns its error (nil when it had none).
func (s *syncer) stop() error {
	close(s.quit)
	<-s.done
	return s.err
}

func (s *syncer) run() {
	defer close(s.done)
	st := s.f.n.st
	var (
		ack       [ackSize]byte
		last      time.Time // start of the last fdatasync
		timer     *time.Timer
		wmFailing bool // the last SaveReadLimit failed (logged once)
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-s.wake:
		case <-s.quit:
			return
		}
		if !s.durableAcks && st.WritePos() > st.FlushedPos() {
			if d := asyncSyncEvery - time.Since(last); d > 0 {
				if timer == nil {
					timer = time.NewTimer(d)
				} else {
					timer.Reset(d)
				}
				select {
				case <-timer.C:
				case <-s.quit:
					return
				}
			}
		}
		dur := st.FlushedPos()
		if st.WritePos() > dur {
			last = time.Now()
			var err error
			if dur, err = st.SyncRaw(); err != nil {
				s.fail(err)
				return
			}
		}
		if dur >= s.f.masterEnd.Load() {
			s.f.caughtUp.Store(time.Now().UnixNano())
		}
		putAck(ack[:], dur)
		_ = s.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := s.nc.Write(ack[:]); err != nil {
			s.fail(err)
			return
		}
		// The read limit on disk: the raise saved it already (one pwrite,
		// not fsynced; store/watermark.go: it may only under-state); this
		// retries a save that failed, and reports it.
		if err := st.SaveReadLimit(); err != nil {
			if !wmFailing {
				s.f.n.log.Warn("replication: the high watermark could not be saved; a restart of this slave serves less until its master speaks",
					"err", err)
			}
			wmFailing = true
		} else {
			wmFailing = false
		}
	}
}

// fail records err and closes the link, which ends the receive loop.
func (s *syncer) fail(err error) {
	s.err = err
	_ = s.nc.Close()
}

// complete reports whether b starts with a whole frame.
func complete(b []byte) bool {
	if len(b) < frameHeaderSize {
		return false
	}
	h, err := decodeFrameHeader(b)
	if err != nil {
		return true // let the parser report it
	}
	return len(b) >= frameHeaderSize+h.n
}

// partialNeed is the buffer size the frame starting b needs.
func partialNeed(b []byte) int {
	if len(b) < frameHeaderSize {
		return 0
	}
	h, err := decodeFrameHeader(b)
	if err != nil {
		return 0
	}
	return frameHeaderSize + h.n
}

func isBlank(b []byte) bool {
	_, magic, ok := protocol.PeekRecord(b)
	return ok && magic == protocol.BlankMagic
}

// readResult reads `result <code> <len> <opaque>\r\n<body>`.
func readResult(br *bufio.Reader) (int, string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return 0, "", err
	}
	f := strings.Fields(line)
	if len(f) < 3 || f[0] != "result" {
		return 0, "", fmt.Errorf("unexpected reply %q", strings.TrimSpace(line))
	}
	code, err1 := strconv.Atoi(f[1])
	n, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil || n < 0 || n > 1<<16 {
		return 0, "", fmt.Errorf("unexpected reply %q", strings.TrimSpace(line))
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(br, body); err != nil {
		return 0, "", err
	}
	return code, string(body), nil
}
