package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
)

// txListener is a scripted TransactionListener.
type txListener struct {
	exec  func(ctx context.Context, m *Message) (TxState, error)
	check func(m *Message) TxState

	mu      sync.Mutex
	checked []*Message
}

func (l *txListener) ExecuteLocal(ctx context.Context, m *Message) (TxState, error) {
	return l.exec(ctx, m)
}

func (l *txListener) Check(_ context.Context, m *Message) TxState {
	l.mu.Lock()
	l.checked = append(l.checked, m)
	l.mu.Unlock()
	return l.check(m)
}

func (l *txListener) checks() []*Message {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Message(nil), l.checked...)
}

// visible returns the bodies of topic/partition's records.
func visible(t *testing.T, ctx context.Context, addr, topic string, part int) []string {
	t.Helper()
	a, err := NewAdmin(Config{Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	res, err := a.Fetch(ctx, addr, topic, part, 0, 1<<20)
	var be *BrokerError
	if errors.As(err, &be) && be.Code == 404 {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range res.Messages {
		out = append(out, string(m.Body))
	}
	return out
}

func waitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ExecuteLocal's commit makes the message visible once; a rollback leaves
// no trace; an unknown outcome is resolved by Check.
func TestTransactionProducer(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Sync: true, Topics: map[string]int{"orders": 1}, Logger: testLogger(),
		ExtraINI: "transactionCheckInterval=100\n"})
	outcome := map[string]TxState{"a": TxCommit, "b": TxRollback, "c": TxUnknown}
	l := &txListener{
		exec: func(_ context.Context, m *Message) (TxState, error) { return outcome[string(m.Body)], nil },
		// A check can also reach "a" or "b" when its own outcome was late (a
		// loaded machine, 100 ms check interval): answer what ExecuteLocal did.
		check: func(m *Message) TxState {
			if st := outcome[string(m.Body)]; st != TxUnknown {
				return st
			}
			return TxCommit
		},
	}
	tp := newTxProducer(t, l, b.Addr)
	ctx := ctxT(t, 30*time.Second)
	for _, body := range []string{"a", "b", "c"} {
		res, state, err := tp.SendInTransaction(ctx, &Message{Topic: "orders", Body: []byte(body), Tag: "new"})
		if err != nil || state != outcome[body] || res.Offset != -1 {
			t.Fatalf("%s: %+v %v %v", body, res, state, err)
		}
	}
	waitCond(t, "the unknown one was checked and committed", func() bool { return len(visible(t, ctx, b.Addr, "orders", 0)) == 2 })
	if got := strings.Join(visible(t, ctx, b.Addr, "orders", 0), ","); got != "a,c" {
		t.Fatalf("visible %q", got)
	}
	// "c" was checked; a late outcome (or a late answer to a check) may add
	// checks of the same or another message, each one a proper check.
	checkedC := false
	for _, m := range l.checks() {
		if m.Topic != "orders" || m.Tag != "new" || m.Properties["pgroup"] != "order-service" {
			t.Fatalf("checked %+v", m)
		}
		checkedC = checkedC || string(m.Body) == "c"
	}
	if !checkedC {
		t.Fatalf("checked %+v, want c among them", l.checks())
	}
}

const txProducerHelperEnv = "METAQ_TXPRODUCER_HELPER"

// TestTxProducerHelper is the child process of TestCheckAfterProducerKill:
// a transaction producer that sends one half message and dies (kill -9) in
// the middle of its local transaction.
func TestTxProducerHelper(t *testing.T) {
	addr := os.Getenv(txProducerHelperEnv)
	if addr == "" {
		t.Skip("helper process of TestCheckAfterProducerKill")
	}
	l := &txListener{
		exec: func(_ context.Context, m *Message) (TxState, error) {
			fmt.Printf("half %d\n", m.MsgID)
			time.Sleep(10 * time.Minute) // killed here: the row is written, the commit never sent
			return TxCommit, nil
		},
		check: func(*Message) TxState { return TxUnknown },
	}
	tp, err := NewTransactionProducer(Config{Brokers: []string{addr}}, "order-service", l)
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(2)
	}
	_, _, err = tp.SendInTransaction(context.Background(), &Message{Topic: "orders", Body: []byte("order-42")})
	fmt.Printf("error %v\n", err)
	os.Exit(2)
}

// The producer process is killed after its half message; the broker's check
// reaches the other producer of the group, whose commit makes the message
// visible exactly once. A half message nobody can resolve (Check answers
// unknown) is rolled back after transactionCheckMax checks.
func TestCheckAfterProducerKill(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Sync: true, Topics: map[string]int{"orders": 1}, Logger: testLogger(),
		ExtraINI: "transactionCheckInterval=100\ntransactionCheckMax=5\n"})
	ctx := ctxT(t, 60*time.Second)

	// The survivor: started first, it knows nothing of the message until asked.
	committed := map[string]bool{"order-42": true}
	l := &txListener{
		exec: func(context.Context, *Message) (TxState, error) { return TxUnknown, nil },
		check: func(m *Message) TxState {
			if committed[string(m.Body)] {
				return TxCommit
			}
			return TxUnknown
		},
	}
	tp := newTxProducer(t, l, b.Addr)
	waitCond(t, "the survivor announced its group", func() bool { return b.Server.TxStats().Producers == 1 })

	cmd := exec.Command(os.Args[0], "-test.run=^TestTxProducerHelper$")
	cmd.Env = append(os.Environ(), txProducerHelperEnv+"="+b.Addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "half ") {
		t.Fatalf("helper: %q %v", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	waitCond(t, "the survivor's check committed the message", func() bool { return len(visible(t, ctx, b.Addr, "orders", 0)) > 0 })
	if got := strings.Join(visible(t, ctx, b.Addr, "orders", 0), ","); got != "order-42" {
		t.Fatalf("visible %q", got)
	}
	if c := l.checks(); len(c) == 0 || fmt.Sprintf("half %d\n", c[0].MsgID) != line {
		t.Fatalf("checks %+v, half message %q", c, line)
	}

	// Nobody knows this one: unknown up to the limit, then rolled back.
	res, _, err := tp.SendInTransaction(ctx, &Message{Topic: "orders", Body: []byte("order-43")})
	if err != nil {
		t.Fatal(err)
	}
	checksOf := func(id int64) (n int) {
		for _, m := range l.checks() {
			if m.MsgID == id {
				n++
			}
		}
		return n
	}
	waitCond(t, "the unresolved message was checked 5 times and rolled back", func() bool {
		return b.Server.TxStats().CheckRollbacks == 1 && checksOf(res.MsgID) == 5
	})
	if got := strings.Join(visible(t, ctx, b.Addr, "orders", 0), ","); got != "order-42" {
		t.Fatalf("visible %q", got)
	}
}

// In direct mode with several brokers, the outcome of a half message goes
// to the broker that stored it even while another broker of the list is
// down: the connection to each broker is identified by its id (`stats`),
// and a broker that cannot be asked is not the one.
func TestTxEndWithAnotherBrokerDown(t *testing.T) {
	down := brokertest.RunBroker(t, brokertest.Options{BrokerID: 1, Topics: map[string]int{"orders": 1}, Logger: testLogger()})
	up := brokertest.RunBroker(t, brokertest.Options{BrokerID: 2, Topics: map[string]int{"orders": 1}, Logger: testLogger()})
	downAddr := down.Addr
	down.Stop()
	l := &txListener{
		exec:  func(context.Context, *Message) (TxState, error) { return TxCommit, nil },
		check: func(*Message) TxState { return TxUnknown },
	}
	tp := newTxProducer(t, l, downAddr, up.Addr)
	waitCond(t, "the first broker's connection is down", func() bool { return !tp.p.direct.conns[0].healthy() })
	ctx := ctxT(t, 30*time.Second)
	res, state, err := tp.SendInTransaction(ctx, &Message{Topic: "orders", Body: []byte("o-1")})
	if err != nil || state != TxCommit || res.Partition.BrokerID != 2 {
		t.Fatalf("SendInTransaction: %+v %v %v", res, state, err)
	}
	if got := strings.Join(visible(t, ctx, up.Addr, "orders", 0), ","); got != "o-1" {
		t.Fatalf("visible %q", got)
	}
	// SendToPartition finds the live broker the same way.
	if _, err := tp.Producer().SendToPartition(ctx, &Message{Topic: "orders", Body: []byte("o-2")}, Partition{BrokerID: 2, Partition: 0}); err != nil {
		t.Fatal(err)
	}
}

// A Check that panics is a check without answer: the producer survives,
// and the broker's next check gets the listener's answer.
func TestCheckPanicIsUnknown(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Sync: true, Topics: map[string]int{"orders": 1}, Logger: testLogger(),
		ExtraINI: "transactionCheckInterval=100\n"})
	var mu sync.Mutex
	calls := 0
	l := &txListener{
		exec: func(context.Context, *Message) (TxState, error) { return TxUnknown, nil },
		check: func(*Message) TxState {
			mu.Lock()
			calls++
			n := calls
			mu.Unlock()
			if n == 1 {
				panic("the order table is gone")
			}
			return TxCommit
		},
	}
	tp := newTxProducer(t, l, b.Addr)
	ctx := ctxT(t, 30*time.Second)
	if _, _, err := tp.SendInTransaction(ctx, &Message{Topic: "orders", Body: []byte("o-1")}); err != nil {
		t.Fatal(err)
	}
	waitCond(t, "the second check committed the message", func() bool { return len(visible(t, ctx, b.Addr, "orders", 0)) == 1 })
	if n := len(l.checks()); n < 2 {
		t.Fatalf("%d checks", n)
	}
}

// A burst of checks — every half message whose outcome was lost comes due
// together, after a producer crash or a broker restart that lost answered
// txends (flushTxLogAtCommit=0) — is answered in full, not cut to the
// checks that find a worker free: the broker counts every check it sent,
// answered or not, and rolls back at transactionCheckMax, so a dropped
// check of a committed local transaction is a lost message.
func TestCheckBurstAnswered(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"orders": 1}, Logger: testLogger(),
		ExtraINI: "transactionCheckInterval=1000\ntransactionCheckMax=1\n"})
	var running, most atomic.Int64
	l := &txListener{
		exec: func(context.Context, *Message) (TxState, error) { return TxUnknown, nil }, // outcome lost
		check: func(*Message) TxState {
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			return TxCommit
		},
	}
	tp := newTxProducer(t, l, b.Addr)
	ctx := ctxT(t, 60*time.Second)
	const n = 4 * maxConcurrentChecks
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() { // together: their checks come due in one or two scans
			defer wg.Done()
			if _, _, err := tp.SendInTransaction(ctx, &Message{Topic: "orders", Body: []byte(fmt.Sprint("o-", i))}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	waitCond(t, "every half message resolved", func() bool { return b.Server.TxStats().PendingHalf == 0 })
	if st := b.Server.TxStats(); st.CheckRollbacks != 0 || len(visible(t, ctx, b.Addr, "orders", 0)) != n {
		t.Fatalf("%d of %d visible, %d rolled back after their check", len(visible(t, ctx, b.Addr, "orders", 0)), n, st.CheckRollbacks)
	}
	if most.Load() > maxConcurrentChecks {
		t.Fatalf("%d checks ran at once, at most %d may", most.Load(), maxConcurrentChecks)
	}
}

// Check gets the message as sent, its own properties included even when
// they are named like the broker's prefix of a half record (rt, rp, pg:
// broker/tx/records.go), and its real topic and partition.
func TestCheckMessageKeepsOwnProperties(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"orders": 2}, Logger: testLogger(),
		ExtraINI: "transactionCheckInterval=100\n"})
	l := &txListener{
		exec:  func(context.Context, *Message) (TxState, error) { return TxUnknown, nil },
		check: func(*Message) TxState { return TxCommit },
	}
	tp := newTxProducer(t, l, b.Addr)
	ctx := ctxT(t, 30*time.Second)
	own := map[string]string{"rt": "route-7", "rp": "x", "pg": "page 2", "order": "o-1"}
	res, _, err := tp.SendInTransaction(ctx, &Message{Topic: "orders", Body: []byte("o-1"), Tag: "new", Properties: own})
	if err != nil {
		t.Fatal(err)
	}
	waitCond(t, "checked", func() bool { return len(l.checks()) > 0 })
	m := l.checks()[0]
	if m.Topic != "orders" || m.Partition != res.Partition || m.MsgID != res.MsgID || m.Tag != "new" || string(m.Body) != "o-1" {
		t.Fatalf("checked %+v, sent %+v", m, res)
	}
	for k, v := range own {
		if m.Properties[k] != v {
			t.Fatalf("checked properties %v, want %v among them", m.Properties, own)
		}
	}
}

// The outcome of a local transaction that used up its caller's context is
// still sent: the message is visible without waiting for a check-back
// (none comes within this test: the check interval is an hour).
func TestTxOutcomeSentAfterCallerContextEnded(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"orders": 1}, Logger: testLogger(),
		ExtraINI: "transactionCheckInterval=3600000\n"})
	ctx, cancel := context.WithCancel(ctxT(t, 30*time.Second))
	l := &txListener{
		exec: func(context.Context, *Message) (TxState, error) {
			cancel() // the caller's deadline passed while the local transaction committed
			return TxCommit, nil
		},
		check: func(*Message) TxState { return TxUnknown },
	}
	tp := newTxProducer(t, l, b.Addr)
	if _, state, err := tp.SendInTransaction(ctx, &Message{Topic: "orders", Body: []byte("o-1")}); err != nil || state != TxCommit {
		t.Fatalf("SendInTransaction: %v %v, want the outcome sent", state, err)
	}
	if got := strings.Join(visible(t, ctxT(t, 30*time.Second), b.Addr, "orders", 0), ","); got != "o-1" {
		t.Fatalf("visible %q, want o-1 at once", got)
	}
}

// newTxProducer is a TransactionProducer of group order-service on brokers,
// closed when the test ends.
func newTxProducer(t *testing.T, l TransactionListener, brokers ...string) *TransactionProducer {
	t.Helper()
	tp, err := NewTransactionProducer(Config{Brokers: brokers, Logger: testLogger()}, "order-service", l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tp.Close() })
	return tp
}
