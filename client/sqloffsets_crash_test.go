package client

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/metaqgo/metaq/zkmeta/zktest"
)

const (
	sqlChildEnvDB = "METAQ_TEST_SQL_CHILD_DB"
	sqlChildEnvZK = "METAQ_TEST_SQL_CHILD_ZK"
)

// openCrashDB opens the crash test's database: WAL with synchronous=NORMAL
// keeps every committed transaction across a process kill (not across a
// power loss, which this test does not simulate).
func openCrashDB(path string) (*sql.DB, error) {
	return sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(30000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
}

// A consumer that writes each message into a SQLite table and commits its
// offset with CommitWithTx in the same transaction is killed with SIGKILL
// at random moments and restarted, until it has consumed everything: the
// table then holds every message exactly once (none lost, none applied
// twice). The consumer is this test binary re-executed as a child process.
func TestSQLExactlyOnceUnderKill(t *testing.T) {
	if path := os.Getenv(sqlChildEnvDB); path != "" {
		sqlCrashChild(path, os.Getenv(sqlChildEnvZK))
		return
	}
	cl := newCluster(t, map[string]int{"ledger": 2}, 1)
	p := cl.producer()
	const n = 600
	ctx := ctxT(t, 2*time.Minute)
	for i := 0; i < n; i++ {
		if _, err := p.Send(ctx, &Message{Topic: "ledger", Body: []byte("m-" + strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "ledger.db")
	db, err := openCrashDB(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE applied (body TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	counts := func() (rows, distinct int) {
		t.Helper()
		if err := db.QueryRow(`SELECT COUNT(*), COUNT(DISTINCT body) FROM applied`).Scan(&rows, &distinct); err != nil {
			t.Fatal(err)
		}
		return rows, distinct
	}
	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSQLExactlyOnceUnderKill$", "-test.count=1")
		cmd.Env = append(os.Environ(), sqlChildEnvDB+"="+path, sqlChildEnvZK+"="+cl.zk)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	kill := func(cmd *exec.Cmd) {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
	kills := 0
	for round := 0; ; round++ {
		cmd := start()
		rows, _ := counts()
		if round < 8 && rows < n-50 {
			// Kill once it applied a random number more: at a random point of its work.
			target := rows + 1 + rand.IntN(60)
			zktest.Eventually(t, time.Minute, func() bool { r, _ := counts(); return r >= target }, "consumer applies %d messages", target)
			kill(cmd)
			kills++
			continue
		}
		zktest.Eventually(t, time.Minute, func() bool { _, d := counts(); return d >= n }, "all %d messages applied", n)
		// Give a duplicate, if the consumer were to make one, time to show.
		time.Sleep(200 * time.Millisecond)
		kill(cmd)
		break
	}
	rows, distinct := counts()
	if rows != n || distinct != n {
		var dups []string
		r, err := db.Query(`SELECT body, COUNT(*) FROM applied GROUP BY body HAVING COUNT(*) > 1 LIMIT 10`)
		if err == nil {
			for r.Next() {
				var b string
				var c int
				_ = r.Scan(&b, &c)
				dups = append(dups, fmt.Sprintf("%s×%d", b, c))
			}
			r.Close()
		}
		t.Fatalf("after %d kills: %d rows, %d distinct messages, want %d of each; duplicates %v", kills, rows, distinct, n, dups)
	}
	t.Logf("%d kills; every message applied exactly once", kills)
}

// sqlCrashChild is the consumer: it runs until killed.
func sqlCrashChild(path, zk string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "sql crash child:", err)
		os.Exit(3)
	}
	db, err := openCrashDB(path)
	if err != nil {
		fail(err)
	}
	store, err := SQLOffsetStore(db, "metaq_offsets")
	if err != nil {
		fail(err)
	}
	cfg := Config{
		ZKConnect: zk,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Consumer: ConsumerOptions{
			Broadcast:      true, // no partition ownership to wait for after a kill
			OffsetStore:    store,
			From:           FromEarliest,
			CommitInterval: 20 * time.Millisecond,
			MaxWait:        time.Second,
		},
	}
	c, err := NewConsumer(cfg, "ledger-writer")
	if err != nil {
		fail(err)
	}
	err = c.Subscribe("ledger", "*", func(ctx context.Context, m *Message) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `INSERT INTO applied (body) VALUES (?)`, string(m.Body)); err != nil {
			return err
		}
		if err := CommitWithTx(ctx, tx, store, m); errors.Is(err, ErrAlreadyCommitted) {
			return nil // processed before: the rollback drops the insert
		} else if err != nil {
			return err
		}
		return tx.Commit()
	})
	if err != nil {
		fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		fail(err)
	}
	select {} // until killed
}
