package tx

import (
	"bytes"
	"errors"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/protocol"
)

// Config configures a Manager. Zero values take the defaults.
type Config struct {
	Store    *store.Store
	BrokerID int
	// MaxTimeout is maxTxTimeoutInSeconds: the longest life of a transaction
	// that is not prepared, and the timeout of one that asked for none.
	MaxTimeout time.Duration
	// CheckInterval (transactionCheckInterval) is how long a half message
	// waits for its txend before the broker checks back, and the spacing of
	// later checks. CheckMax (transactionCheckMax) checks without an outcome
	// roll it back.
	CheckInterval time.Duration
	CheckMax      int
	// MaxHeldBytes bounds the message bytes held in memory by open
	// (unprepared) transactions, broker-wide; a put beyond it fails.
	MaxHeldBytes int64
	// MaxPendingHalf bounds the half messages waiting for an outcome.
	MaxPendingHalf int
	// MaxOpen (maxTxTimeoutTimerCapacity) bounds the transactions begun and
	// not prepared, broker-wide, and MaxOpenPerConn (maxTxPerConnection)
	// those begun on one connection (Session), local and XA: a BEGIN without
	// puts holds no bytes, so MaxHeldBytes does not bound them, yet each is
	// an entry and a timer until its timeout. A BEGIN beyond either is
	// refused with ErrBusy (503). Prepared transactions are not counted: they
	// hold nothing in memory but their entry (docs/transactions.md).
	MaxOpen        int
	MaxOpenPerConn int
	// ScanBudget bounds the time one check scan may take.
	ScanBudget time.Duration
	// Schedule turns a message about to be committed into its %SCHEDULE%
	// record when its properties ask for a delay (delay=, deliverAt=), so
	// that a committed transactional message keeps its delay; ok is false
	// for a message that is not delayed. nil: delay properties are stored as
	// given.
	Schedule func(m *store.Message) (out store.Message, ok bool, err error)
	Logger   *slog.Logger
	Now      func() time.Time
	// OnEvent, when set, is told what happens to half messages (event.go;
	// the broker's message trace).
	OnEvent func(*Event)
	// CallerWritesOut: the caller of Command, Put, PutHalf and End writes
	// async-flush appends out (store.WriteOut) before acknowledging them, as
	// a broker connection does once per batch of commands read; the table
	// then does not write out each of its appends itself (one system call
	// per transaction step).
	CallerWritesOut bool
	// EndWithoutFlush (flushTxLogAtCommit 0 or 2): a txend is answered as
	// soon as its outcome is appended, without waiting for the group commit
	// that makes it durable (it rides on the next one). A crash may then
	// lose an answered outcome; the half message, durable before its put
	// was answered, is pending again after the restart and checked back, so
	// it is still committed once or rolled back (docs/transactions.md).
	EndWithoutFlush bool
	// Standby: the broker is a slave (docs/replication.md): the table is
	// built from the log but nothing is written — no check-back, no
	// completion of a commit run the log holds only part of (the master's
	// log brings the rest) — until Recover (standby.go).
	Standby bool
}

// Defaults.
const (
	DefaultMaxTimeout     = 60 * time.Second
	DefaultCheckInterval  = 60 * time.Second
	DefaultCheckMax       = 15
	DefaultMaxHeldBytes   = 256 << 20
	DefaultMaxPendingHalf = 1 << 20
	DefaultMaxOpen        = 30000 // MetaQ's maxTxTimeoutTimerCapacity default
	DefaultMaxOpenPerConn = 1024
	DefaultScanBudget     = 100 * time.Millisecond
)

type txState uint8

const (
	stStart    txState = iota // begun, no message yet
	stInUse                   // at least one put
	stPrepared                // XA prepared: messages in %TX_HALF%
)

// Tx is one open transaction.
type Tx struct {
	key  string
	kind Kind
	uq   string
	sess *Session // local transactions: the owning connection's session
	// owner: the user who began it (CommandAs; "" when security is off),
	// kept in its prepare op (records.go) so that a restart or a promotion
	// keeps it; noOwner: a prepared transaction whose prepare op names none
	// (written by an older broker): only an admin may use it (XAOwner).
	owner   string
	noOwner bool
	by      *Session // the session that began it (nil: none), counted in by.open while not prepared
	state   txState
	busy    bool // a prepare/commit/rollback is appending; others get XAER_PROTO
	msgs    []store.Message
	bytes   int64
	timer   *time.Timer
	// deadline: when it times out unless prepared (its timer is stopped
	// while a command appends it, re-armed for the rest if it stays open)
	deadline time.Time
	ids      []int64 // the traced messages' provisional ids (event.go; nil when none is traced)
	// uncounted: no longer counted in Manager.openN and by.open (prepared or forgotten)
	uncounted bool

	halfFrom int64 // prepared: %TX_HALF%/0 [halfFrom, halfFrom+halfN)
	halfN    int
}

// half is a half message waiting for txend.
type half struct {
	id     int64 // message id of the %TX_HALF% record
	group  string
	due    time.Time
	checks int
	// the due list (guarded by Manager.mu)
	prev, next *half
	// The message as it will be committed, kept from its put while the
	// budget allows (nil: read back from the log at commit): topic,
	// partition, flag, born time, and body = own properties + data.
	topic     string
	partition int32
	flag      int32
	born      int64
	traced    uint16 // protocol.SysFlagTraced of the put (kept for the commit)
	nprops    int
	body      []byte
}

// Prober is a live producer connection the broker can send `check` to.
// SendCheck must not block; it reports whether the request was queued.
type Prober interface {
	SendCheck(msgID int64) bool
}

type group struct {
	members []Prober
	next    int
}

// Manager is the broker's transaction table.
type Manager struct {
	cfg Config
	st  *store.Store
	log *slog.Logger

	mu       sync.Mutex
	xa       map[string]*Tx
	held     int64
	halves   map[int64]*half
	dueHead  *half // the due list, earliest first (half.go)
	dueTail  *half
	free     []*half // finished halves for reuse
	groups   map[string]*group
	sessions map[*Session]struct{} // open sessions (their local transactions' timers, for Close)
	localN   int
	openN    int // transactions begun and not prepared (Config.MaxOpen)
	closed   bool
	lastWarn time.Time // rate limit of "no live producer" warnings

	provisional atomic.Int64 // provisional ids of puts inside a transaction
	pending     atomic.Int64 // len(halves), read without the lock (PutHalf's bound)
	kept        int64        // bytes of half bodies kept in memory (guarded by mu)
	scanEnd     endScratch   // EndBatch buffers of the check scan (its goroutine only)
	standby     atomic.Bool  // a slave's table: no checks, no writes (standby.go)

	begun, xaBegun, committed, rolledBack, timedOut, checksSent, checkRollbacks atomic.Int64

	stop chan struct{}
	wg   sync.WaitGroup
}

// Errors the broker maps to reply codes.
var (
	ErrBusy     = errors.New("tx: too many pending transactions or held bytes")
	ErrNotFound = errors.New("tx: no such pending half message")
	ErrClosed   = errors.New("tx: closed")
)

// busyError is an ErrBusy with its reason (reply 503).
type busyError struct{ msg string }

func (e *busyError) Error() string        { return e.msg }
func (e *busyError) Is(target error) bool { return target == ErrBusy }

// BadRequest is an error the client caused (reply 400).
type BadRequest struct{ Msg string }

func (e *BadRequest) Error() string { return e.Msg }

// Open rebuilds the transaction table from the commit log (prepared XA
// transactions and pending half messages) and starts the check-back loop.
func Open(cfg Config) (*Manager, error) {
	if cfg.Store == nil {
		return nil, errors.New("tx: Config.Store is required")
	}
	if cfg.MaxTimeout <= 0 {
		cfg.MaxTimeout = DefaultMaxTimeout
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = DefaultCheckInterval
	}
	if cfg.CheckMax <= 0 {
		cfg.CheckMax = DefaultCheckMax
	}
	if cfg.MaxHeldBytes <= 0 {
		cfg.MaxHeldBytes = DefaultMaxHeldBytes
	}
	if cfg.MaxPendingHalf <= 0 {
		cfg.MaxPendingHalf = DefaultMaxPendingHalf
	}
	if cfg.ScanBudget <= 0 {
		cfg.ScanBudget = DefaultScanBudget
	}
	if cfg.MaxOpen <= 0 {
		cfg.MaxOpen = DefaultMaxOpen
	}
	if cfg.MaxOpenPerConn <= 0 {
		cfg.MaxOpenPerConn = DefaultMaxOpenPerConn
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m := &Manager{
		cfg:      cfg,
		st:       cfg.Store,
		log:      cfg.Logger.With("component", "tx"),
		xa:       make(map[string]*Tx),
		halves:   make(map[int64]*half),
		groups:   make(map[string]*group),
		sessions: make(map[*Session]struct{}),
		stop:     make(chan struct{}),
	}
	m.standby.Store(cfg.Standby)
	if err := m.recover(); err != nil {
		return nil, err
	}
	m.wg.Add(1)
	go m.checkLoop()
	return m, nil
}

// Close stops the check-back loop and the timeouts. Open transactions that
// are not prepared are dropped (they were never visible).
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	for _, t := range m.xa {
		if t.timer != nil {
			t.timer.Stop()
		}
	}
	for s := range m.sessions { // local transactions belong to their session
		for _, t := range s.txs {
			if t.timer != nil {
				t.timer.Stop()
			}
		}
	}
	m.mu.Unlock()
	close(m.stop)
	m.wg.Wait()
}

// Stats are the counters `stats` reports.
type Stats struct {
	PendingHalf    int   // half messages waiting for an outcome
	Prepared       int   // prepared XA transactions
	Open           int   // transactions begun, not prepared
	HeldBytes      int64 // bytes held in memory by open transactions
	Producers      int   // live producer registrations (connection × group)
	Begun          int64 // local transactions begun
	XABegun        int64 // XA transactions begun
	Committed      int64
	RolledBack     int64
	TimedOut       int64
	ChecksSent     int64
	CheckRollbacks int64 // half messages rolled back after transactionCheckMax checks
}

// Stats returns the current counters.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	s := Stats{PendingHalf: len(m.halves), HeldBytes: m.held, Open: m.localN}
	for _, g := range m.groups {
		s.Producers += len(g.members)
	}
	for _, t := range m.xa {
		if t.state == stPrepared {
			s.Prepared++
		} else {
			s.Open++
		}
	}
	m.mu.Unlock()
	s.Begun, s.XABegun = m.begun.Load(), m.xaBegun.Load()
	s.Committed, s.RolledBack, s.TimedOut = m.committed.Load(), m.rolledBack.Load(), m.timedOut.Load()
	s.ChecksSent, s.CheckRollbacks = m.checksSent.Load(), m.checkRollbacks.Load()
	return s
}

// Session holds one connection's local transactions; Close rolls them back.
type Session struct {
	m      *Manager
	txs    map[string]*Tx // guarded by m.mu
	probes []string       // producer groups this connection registered in (guarded by m.mu)
	probe  Prober
	closed bool
	open   int // transactions begun on this connection and not prepared (guarded by m.mu)

	// Used only by the connection's reader goroutine (the one caller of
	// PutHalf and EndBatch with this session): buffers reused command
	// after command, and the names seen last.
	props []byte
	end   endScratch
	names nameCache
}

// nameCache keeps the producer group and the topic named last as strings.
type nameCache struct{ group, topic string }

// GroupName returns the producer group named by raw (a property value,
// still URL-escaped) as a string, the one of the previous call when it is
// the same group: a connection sends one group's half messages in a row.
func (s *Session) GroupName(raw []byte) string {
	if string(raw) != s.names.group {
		s.names.group = protocol.Unescape(raw)
	}
	return s.names.group
}

func (c *nameCache) topicName(raw []byte) string {
	if string(raw) != c.topic {
		c.topic = protocol.Unescape(raw)
	}
	return c.topic
}

// NewSession returns the transaction state of a new connection; p is the
// connection as a check-back target.
func (m *Manager) NewSession(p Prober) *Session {
	s := &Session{m: m, txs: make(map[string]*Tx), probe: p}
	m.mu.Lock()
	if !m.closed {
		m.sessions[s] = struct{}{}
	}
	m.mu.Unlock()
	return s
}

// Close rolls back the session's local transactions (a closed connection
// rolls back, as MetaQ) and removes the connection from its producer groups.
func (s *Session) Close() {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	delete(m.sessions, s)
	n := 0
	for _, t := range s.txs {
		if !t.busy {
			m.emitTxRollbackLocked(t, "rolled back: the connection closed") // event.go
			m.dropLocked(t)
			n++
		}
	}
	for _, g := range s.probes {
		m.removeProberLocked(g, s.probe)
	}
	s.probes = nil
	if n > 0 {
		m.rolledBack.Add(int64(n))
		m.log.Debug("connection closed: local transactions rolled back", "count", n)
	}
}

// Result is the outcome of a transaction command, for the reply.
type Result struct {
	Body    string       // result 200 body
	NoReply bool         // END: MetaQ sends no reply
	Flush   *store.Flush // reply only once this group commit is durable (nil: already)
	// Appended: the command appended to the commit log (with
	// CallerWritesOut, the reply must fail if the caller's write-out fails).
	Appended bool
}

// Command runs `transaction <key> <sessionId> <type> [<timeoutS>] [<uq>]`
// for no user (CommandAs).
// The error is an *XAError, a *BadRequest or a plain error (reply 500).
func (m *Manager) Command(s *Session, key, typ string, timeoutS int, uq string) (Result, error) {
	return m.CommandAs(s, "", key, typ, timeoutS, uq)
}

// CommandAs is Command for the connection's user ("" when security is off,
// or not authenticated): the BEGIN of a new transaction records user as its
// owner (XAOwner), which its prepare op keeps in the commit log.
func (m *Manager) CommandAs(s *Session, user, key, typ string, timeoutS int, uq string) (Result, error) {
	kind, keyUQ, err := ParseKey([]byte(key))
	if err != nil {
		return Result{}, &BadRequest{Msg: err.Error()}
	}
	switch typ {
	case "BEGIN":
		return Result{}, m.begin(s, user, key, kind, keyUQ, timeoutS)
	case "END":
		return Result{NoReply: true}, nil
	case "PREPARE":
		return m.prepare(s, key, kind)
	case "COMMIT_ONE_PHASE":
		return m.commit(s, key, kind, true)
	case "COMMIT_TWO_PHASE":
		return m.commit(s, key, kind, false)
	case "ROLLBACK":
		return m.rollback(s, key, kind)
	case "FORGET":
		if kind != KindXA {
			return Result{}, xaErr(XAErrNotA, "Transaction '"+key+"' is not an XA transaction")
		}
		return Result{}, nil
	case "RECOVER":
		return Result{Body: strings.Join(m.Prepared(uq), "\r\n")}, nil
	}
	return Result{}, errors.New("Unknow transaction command type:" + typ)
}

// Prepared lists the prepared XA transactions whose unique qualifier is uq
// (all of them when uq is empty), sorted.
func (m *Manager) Prepared(uq string) []string {
	m.mu.Lock()
	var out []string
	for k, t := range m.xa {
		if t.state == stPrepared && (uq == "" || t.uq == uq) {
			out = append(out, k)
		}
	}
	m.mu.Unlock()
	sort.Strings(out)
	return out
}

// XAOwner reports who owns the XA transaction key, for the broker's check
// under [security] (docs/security.md): held is false when the table has no
// such transaction; known is false when it has one prepared by an older
// broker, whose prepare op names no owner (admins only). O(1), no allocation.
func (m *Manager) XAOwner(key []byte) (user string, known, held bool) {
	m.mu.Lock()
	t := m.xa[string(key)]
	m.mu.Unlock()
	if t == nil {
		return "", false, false
	}
	return t.owner, !t.noOwner, true
}

func (m *Manager) lookupLocked(s *Session, key string, kind Kind) *Tx {
	if kind == KindXA {
		return m.xa[key]
	}
	if s == nil {
		return nil
	}
	return s.txs[key]
}

func (m *Manager) begin(s *Session, user, key string, kind Kind, uq string, timeoutS int) error {
	if kind == KindNull {
		return &BadRequest{Msg: "BEGIN needs a transaction id, not null"}
	}
	if !printableKey(key) {
		// Only BEGIN refuses: a prepared transaction of an older broker
		// whose key has such bytes can still be committed or rolled back.
		return &BadRequest{Msg: "invalid transaction id " + strconv.Quote(key) + ": only printable ASCII (no spaces)"}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if m.lookupLocked(s, key, kind) != nil {
		return nil // MetaQ: BEGIN on an existing transaction is a no-op (its owner stays)
	}
	if kind == KindLocal && (s == nil || s.closed) {
		return ErrClosed
	}
	if m.openN >= m.cfg.MaxOpen {
		return &busyError{msg: "tx: " + strconv.Itoa(m.openN) + " transactions open on this broker (maxTxTimeoutTimerCapacity): BEGIN refused, retry later"}
	}
	if s != nil && s.open >= m.cfg.MaxOpenPerConn {
		return &busyError{msg: "tx: " + strconv.Itoa(s.open) + " transactions open on this connection (maxTxPerConnection): BEGIN refused, finish some first"}
	}
	t := &Tx{key: key, kind: kind, uq: uq, by: s, owner: user}
	m.openN++
	if s != nil {
		s.open++
	}
	d := m.cfg.MaxTimeout
	if timeoutS > 0 && time.Duration(timeoutS)*time.Second < d {
		d = time.Duration(timeoutS) * time.Second
	}
	t.deadline = time.Now().Add(d)
	t.timer = time.AfterFunc(d, func() { m.expire(t) })
	if kind == KindXA {
		m.xa[key] = t
		m.xaBegun.Add(1)
	} else {
		t.sess = s
		s.txs[key] = t
		m.localN++
		m.begun.Add(1)
	}
	return nil
}

// expire rolls back a transaction that was not prepared in time.
func (m *Manager) expire(t *Tx) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || t.busy || t.state == stPrepared || m.lookupLocked(t.sess, t.key, t.kind) != t {
		return
	}
	m.emitTxRollbackLocked(t, "rolled back: not prepared within its timeout") // event.go
	m.dropLocked(t)
	m.timedOut.Add(1)
	m.log.Info("transaction timed out and was rolled back", "tx", t.key, "messages", len(t.msgs))
}

// dropLocked forgets t (rollback of a transaction that is not prepared,
// or the end of a prepared one).
func (m *Manager) dropLocked(t *Tx) {
	if t.timer != nil {
		t.timer.Stop()
	}
	m.unopenLocked(t)
	m.held -= t.bytes
	t.msgs, t.bytes = nil, 0
	if t.kind == KindXA {
		delete(m.xa, t.key)
	} else if t.sess.txs[t.key] == t {
		delete(t.sess.txs, t.key)
		m.localN--
	}
}

func notStarted(key string, kind Kind) string {
	if kind == KindXA {
		return "XA transaction '" + key + "' has not been started."
	}
	return "Local transaction '" + key + "' has not been started."
}

// Put holds msg (copied) in transaction key until it commits and returns
// the provisional message id of the put's reply.
func (m *Manager) Put(s *Session, key []byte, msg *store.Message) (int64, error) {
	// Only a begun transaction's key can match, and BEGIN validated it: the
	// prefix tells which table to look in (no parse, no allocation).
	var kind Kind
	switch {
	case bytes.HasPrefix(key, []byte("TX:")):
		kind = KindLocal
	case bytes.HasPrefix(key, []byte("XID:")):
		kind = KindXA
	default:
		if _, _, err := ParseKey(key); err != nil {
			return 0, &BadRequest{Msg: err.Error()}
		}
		return 0, &BadRequest{Msg: "a transactional put needs a transaction id, not null"}
	}
	if err := m.scheduleFits(msg); err != nil {
		return 0, err
	}
	size := int64(len(msg.Data) + len(msg.Properties) + len(msg.Topic))
	m.mu.Lock()
	defer m.mu.Unlock()
	var t *Tx
	if kind == KindXA {
		t = m.xa[string(key)] // no allocation
	} else if s != nil {
		t = s.txs[string(key)]
	}
	switch {
	case t == nil:
		return 0, errors.New(notStarted(string(key), kind))
	case t.busy || t.state == stPrepared:
		return 0, xaErr(XAErrProto, "transaction '"+string(key)+"' is prepared or finishing: no more puts")
	case m.held+size > m.cfg.MaxHeldBytes:
		return 0, ErrBusy
	case kind == KindXA && !halfFits(msg, t.key):
		return 0, &BadRequest{Msg: "properties too long for a transaction: with the " + HalfTopic +
			" prefix rt=&rp=&xid= its prepared record would have more than " + strconv.Itoa(protocol.MaxPropertiesLen) + " bytes of properties"}
	}
	buf := make([]byte, len(msg.Properties)+len(msg.Data))
	copy(buf, msg.Properties)
	copy(buf[len(msg.Properties):], msg.Data)
	cp := *msg
	cp.Properties = buf[:len(msg.Properties):len(msg.Properties)]
	cp.Data = buf[len(msg.Properties):]
	t.msgs = append(t.msgs, cp)
	t.bytes += size
	m.held += size
	t.state = stInUse
	// A provisional id: the message gets its real id (its position in the
	// commit log) when the transaction commits.
	id := protocol.MakeMsgID(m.cfg.BrokerID, 1<<47|m.provisional.Add(1))
	if m.cfg.OnEvent != nil && cp.SysFlag&protocol.SysFlagTraced != 0 {
		t.traceID(len(t.msgs)-1, id) // event.go
		m.emit(Event{Kind: EvTxPut, ID: id, Key: t.key, Topic: cp.Topic, Partition: cp.Partition, Props: cp.Properties, SysFlag: cp.SysFlag})
	}
	return id, nil
}

// halfFits reports whether the %TX_HALF% record of msg, put in the XA
// transaction key, keeps its properties within the record's limit (a put's
// own properties may take the whole limit; PREPARE prefixes them).
func halfFits(msg *store.Message, key string) bool {
	if len(msg.Properties)+3*(len(msg.Topic)+len(key))+32 <= protocol.MaxPropertiesLen {
		return true // whatever the escaping
	}
	var pre [256]byte
	n := len(halfProps(pre[:0], msg.Topic, msg.Partition, "xid", key, nil))
	if len(msg.Properties) > 0 {
		n += 1 + len(msg.Properties)
	}
	return n <= protocol.MaxPropertiesLen
}

// take marks t busy for an append, after checking it may do op.
func (m *Manager) take(s *Session, key string, kind Kind, check func(*Tx) error) (*Tx, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.lookupLocked(s, key, kind)
	if t == nil {
		return nil, xaErr(XAErrNotA, notStarted(key, kind))
	}
	if t.busy {
		return nil, xaErr(XAErrProto, "transaction '"+key+"' is busy with another command")
	}
	if err := check(t); err != nil {
		return nil, err
	}
	t.busy = true
	if t.timer != nil {
		t.timer.Stop()
	}
	return t, nil
}

// unopenLocked stops counting t as open (it is prepared or gone).
func (m *Manager) unopenLocked(t *Tx) {
	if t.state == stPrepared || t.uncounted {
		return
	}
	t.uncounted = true
	m.openN--
	if t.by != nil {
		t.by.open--
	}
}

// release ends an append started by take: done removes t from the table.
func (m *Manager) release(t *Tx, done bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t.busy = false
	if done {
		m.dropLocked(t)
		return
	}
	if t.state == stPrepared {
		return // no timeout: it waits for its coordinator
	}
	if t.sess != nil && t.sess.closed {
		m.dropLocked(t) // the connection closed meanwhile
		return
	}
	// Still open after a failed command (a PREPARE whose append failed):
	// its timeout runs on, for what was left of it when take stopped it.
	if t.timer != nil && !m.closed {
		t.timer.Reset(max(time.Until(t.deadline), 0))
	}
}

// schedule routes the delayed messages of a run to commit through
// Config.Schedule (in place).
func (m *Manager) schedule(run []store.Message) error {
	if m.cfg.Schedule == nil {
		return nil
	}
	for i := range run {
		if !mayDelay(run[i].Properties) {
			continue
		}
		out, ok, err := m.cfg.Schedule(&run[i])
		if err != nil {
			return err
		}
		if ok {
			run[i] = out
		}
	}
	return nil
}

// appendRun appends msgs as one contiguous run and makes it durable as the
// store's mode says: in async mode written out now, in sync mode the
// returned Flush completes when it is.
func (m *Manager) appendRun(msgs []store.Message) (*store.Flush, error) {
	f, _, err := m.appendRunResults(msgs)
	return f, err
}

// appendRunResults is appendRun with every record's result.
func (m *Manager) appendRunResults(msgs []store.Message) (*store.Flush, []store.AppendResult, error) {
	res := make([]store.AppendResult, len(msgs))
	f, err := m.st.AppendBatch(msgs, res)
	if err != nil {
		return nil, nil, err
	}
	return f, res, m.writeOut(f)
}

// writeOut writes an async-flush append out (store.WriteOut) unless the
// caller does (Config.CallerWritesOut).
func (m *Manager) writeOut(f *store.Flush) error {
	if f != nil || m.cfg.CallerWritesOut {
		return nil
	}
	return m.st.WriteOut()
}

func (m *Manager) prepare(s *Session, key string, kind Kind) (Result, error) {
	if kind != KindXA {
		return Result{}, xaErr(XAErrRMErr, "Local transaction '"+key+"' can not be prepared")
	}
	t, err := m.take(s, key, kind, func(t *Tx) error {
		if t.state == stPrepared {
			return xaErr(XAErrProto, "transaction '"+key+"' is already prepared")
		}
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	if t.state == stStart {
		m.release(t, true)
		return Result{Body: strconv.Itoa(XARDOnly)}, nil
	}
	run := make([]store.Message, 0, len(t.msgs)+1)
	for i := range t.msgs {
		msg := &t.msgs[i]
		run = append(run, store.Message{
			Topic: HalfTopic, Flag: msg.Flag, BornTime: msg.BornTime,
			SysFlag:    protocol.SysFlagTxPrepared | msg.SysFlag&protocol.SysFlagTraced,
			Properties: halfProps(nil, msg.Topic, msg.Partition, "xid", key, msg.Properties),
			Data:       msg.Data,
		})
	}
	res := make([]store.AppendResult, len(run))
	f, err := m.appendPrepared(run, res, key, t.owner)
	if err != nil {
		m.release(t, false)
		return Result{}, xaErr(XAErrRMErr, "prepare failed: "+err.Error())
	}
	for i, id := range t.ids {
		if id != 0 && i < len(res) {
			m.emit(Event{Kind: EvTxPrepared, ID: id, Key: key, Topic: t.msgs[i].Topic, Partition: t.msgs[i].Partition,
				SysFlag: protocol.SysFlagTraced, Result: res[i]})
		}
	}
	m.mu.Lock()
	m.unopenLocked(t)
	t.state = stPrepared
	t.halfFrom, t.halfN = res[0].QueueOffset, len(t.msgs)
	m.held -= t.bytes
	t.msgs, t.bytes = nil, 0
	t.busy = false
	m.mu.Unlock()
	return Result{Body: strconv.Itoa(XAOK), Flush: f, Appended: true}, nil
}

// appendPrepared appends the half records of a prepare as one run, then
// the op record naming their range in %TX_HALF%/0 (known from the run's
// results). A crash between the two leaves half records no prepare op
// refers to: recovery ignores them, and the transaction, whose PREPARE was
// never answered, is rolled back, as after any crash before PREPARE. The
// op's durability implies the run's (they are flushed in order). The op
// names the transaction's owner, so that it survives a restart.
func (m *Manager) appendPrepared(run []store.Message, res []store.AppendResult, key, owner string) (*store.Flush, error) {
	if _, err := m.st.AppendBatch(run, res); err != nil {
		return nil, err
	}
	op := store.Message{Topic: OpTopic, Data: appendPrepareOp(nil, key, res[0].QueueOffset, len(run), owner)}
	_, f, err := m.st.AppendAsync(&op)
	if err == nil {
		err = m.writeOut(f)
	}
	return f, err
}
