// Command orderservice is the worked example of transactional messages
// (docs/transactions.md): an order service that writes an order row in
// SQLite and publishes an "order created" message in the same flow, so that
// the message is visible if and only if the row was committed.
//
//	orderservice -broker 127.0.0.1:8123 -db orders.db place o-1 book   # row + message
//	orderservice -broker 127.0.0.1:8123 -db orders.db -crash place o-2 pen
//	    (dies after the row is committed, before telling the broker)
//	orderservice -broker 127.0.0.1:8123 -db orders.db serve
//	    (a live producer of the group: answers the broker's check for o-2 from the table)
//
// The message goes out first as a half message (invisible); the local
// database transaction runs in ExecuteLocal; its outcome commits or rolls
// back the message. When the process dies in between, the broker asks any
// live producer of the group (Check), which looks the order up.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/metaqgo/metaq/client"
	_ "modernc.org/sqlite" // pure-Go SQLite driver for database/sql
)

const (
	topic = "orders"
	group = "order-service"
)

// Service writes orders and publishes them transactionally.
type Service struct {
	DB *sql.DB
	// Crash makes ExecuteLocal stop the process after the row is committed
	// and before the outcome reaches the broker (the case check-back is for).
	Crash func()
}

// OpenDB opens (and creates) the order table.
func OpenDB(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", path)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1) // SQLite: one writer
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, item TEXT NOT NULL, created INTEGER NOT NULL)`); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// ExecuteLocal inserts the order row of msg in one database transaction.
func (s *Service) ExecuteLocal(ctx context.Context, msg *client.Message) (client.TxState, error) {
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return client.TxUnknown, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, item, created) VALUES (?, ?, ?)`,
		msg.Keys[0], string(msg.Body), time.Now().UnixMilli()); err != nil {
		_ = tx.Rollback()
		return client.TxRollback, nil // no row: the message must never be seen
	}
	if err := tx.Commit(); err != nil {
		return client.TxRollback, nil
	}
	if s.Crash != nil {
		s.Crash()
	}
	return client.TxCommit, nil
}

// Check answers the broker: the message is committed when its row exists.
// A missing row means its transaction never committed (the broker asks only
// after transactionCheckInterval, far longer than an insert takes).
func (s *Service) Check(ctx context.Context, msg *client.Message) client.TxState {
	if len(msg.Keys) == 0 {
		return client.TxRollback
	}
	var n int
	if err := s.DB.QueryRowContext(ctx, `SELECT COUNT(*) FROM orders WHERE id = ?`, msg.Keys[0]).Scan(&n); err != nil {
		return client.TxUnknown // ask again later
	}
	if n > 0 {
		return client.TxCommit
	}
	return client.TxRollback
}

// Place writes order id and publishes it.
func Place(ctx context.Context, tp *client.TransactionProducer, id, item string) (client.SendResult, client.TxState, error) {
	return tp.SendInTransaction(ctx, &client.Message{Topic: topic, Keys: []string{id}, Tag: "created", Body: []byte(item)})
}

func main() {
	broker := flag.String("broker", "127.0.0.1:8123", "broker address")
	dbPath := flag.String("db", "orders.db", "SQLite database file")
	crash := flag.Bool("crash", false, "place: die (SIGKILL) after the row is committed, before the broker hears of it")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: orderservice [-broker addr] [-db file] [-crash] place <orderId> <item> | serve\n")
	}
	flag.Parse()
	if err := run(*broker, *dbPath, *crash, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "orderservice:", err)
		os.Exit(1)
	}
}

func run(broker, dbPath string, crash bool, args []string) error {
	if len(args) == 0 {
		flag.Usage()
		return errors.New("missing command")
	}
	db, err := OpenDB(dbPath)
	if err != nil {
		return err
	}
	defer db.Close()
	svc := &Service{DB: db}
	if crash {
		svc.Crash = func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) }
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	tp, err := client.NewTransactionProducer(client.Config{Brokers: []string{broker}, Logger: log}, group, svc)
	if err != nil {
		return err
	}
	defer tp.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch {
	case args[0] == "place" && len(args) == 3:
		res, state, err := Place(ctx, tp, args[1], args[2])
		if err != nil {
			return err
		}
		fmt.Printf("order %s: message %d %s\n", args[1], res.MsgID, state)
		return nil
	case args[0] == "serve" && len(args) == 1:
		fmt.Println("answering the broker's checks for group", group, "(Ctrl-C to stop)")
		<-ctx.Done()
		return nil
	}
	flag.Usage()
	return errors.New("bad command")
}
