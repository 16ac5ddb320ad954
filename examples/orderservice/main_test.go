package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/client"
)

const helperEnv = "ORDERSERVICE_HELPER"

// TestHelperCrash is the child process: `orderservice -crash place o-2 pen`,
// which kills itself (SIGKILL) between the committed row and the commit.
func TestHelperCrash(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("helper process")
	}
	err := run(os.Getenv(helperEnv), os.Getenv(helperEnv+"_DB"), true, []string{"place", "o-2", "pen"})
	t.Fatalf("still alive: %v", err)
}

// The order service places o-1 normally; a second instance dies after
// writing o-2's row; the broker's check reaches the first instance, which
// finds the row and commits: both orders are published exactly once.
func TestOrderServiceCrashResolvedByCheck(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Sync: true, Topics: map[string]int{topic: 1},
		ExtraINI: "transactionCheckInterval=100\n"})
	dbPath := filepath.Join(t.TempDir(), "orders.db")
	db, err := OpenDB(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tp, err := client.NewTransactionProducer(client.Config{Brokers: []string{b.Addr}}, group, &Service{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, state, err := Place(ctx, tp, "o-1", "book"); err != nil || state != client.TxCommit {
		t.Fatalf("place o-1: %v %v", state, err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperCrash$")
	cmd.Env = append(os.Environ(), helperEnv+"="+b.Addr, helperEnv+"_DB="+dbPath)
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ProcessState.Sys() == nil || ee.String() != "signal: killed" {
		t.Fatalf("helper: %v", err)
	}

	a, err := client.NewAdmin(client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := a.Fetch(ctx, b.Addr, topic, 0, 0, 1<<20)
		if err == nil && len(res.Messages) == 2 {
			if res.Messages[0].Keys[0] != "o-1" || res.Messages[1].Keys[0] != "o-2" || string(res.Messages[1].Body) != "pen" {
				t.Fatalf("messages %v", res.Messages)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("o-2 not published: %v %v", res, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := b.Server.TxStats(); st.PendingHalf != 0 || st.Committed < 2 {
		t.Fatalf("stats %+v", st)
	}
}
