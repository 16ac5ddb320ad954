package peerbench

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/metaqgo/metaq/benchkit"
)

// The test binary doubles as a fake `metaq` (broker and bench) so that the
// metaq plug-in path is tested end to end before the real CLI exists.
func TestMain(m *testing.M) {
	if os.Getenv("PEERBENCH_FAKE_METAQ") == "1" {
		os.Exit(fakeMetaq(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func fakeMetaq(args []string) int {
	if len(args) == 0 {
		return 2
	}
	switch args[0] {
	case "broker":
		if len(args) != 3 || args[1] != "-c" {
			fmt.Fprintln(os.Stderr, "usage: metaq broker -c server.ini")
			return 2
		}
		ini, err := os.ReadFile(args[2])
		if err != nil {
			return 1
		}
		port := regexp.MustCompile(`(?m)^serverPort=(\d+)$`).FindSubmatch(ini)
		host := regexp.MustCompile(`(?m)^bindHost=(.+)$`).FindSubmatch(ini)
		if port == nil || host == nil || !strings.Contains(string(ini), "zk.zkEnable=false") {
			fmt.Fprintln(os.Stderr, "bad ini")
			return 1
		}
		l, err := net.Listen("tcp", string(host[1])+":"+string(port[1]))
		if err != nil {
			return 1
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		<-sig
		return 0
	case "bench":
		if len(args) < 2 {
			return 2
		}
		wl := args[1]
		fs := flag.NewFlagSet("bench", flag.ContinueOnError)
		jsonOut := fs.Bool("json", false, "")
		server := fs.String("server", "", "")
		pid := fs.Int("server-pid", 0, "")
		fs.String("topic", "", "")
		size := fs.Int("msg-size", 0, "")
		fs.Int("conns", 0, "")
		fs.Int("window", 0, "")
		dur := fs.Duration("duration", 0, "")
		fs.Int64("count", 0, "")
		fs.Float64("rate", 0, "")
		fs.Int("topics", 0, "")
		fs.Int("partitions", 0, "")
		fs.Int("pairs", 0, "")
		fs.Int("batch", 0, "")
		fs.Int("batch-inflight", 0, "")
		if err := fs.Parse(args[2:]); err != nil || !*jsonOut || *pid == 0 || *dur == 0 {
			return 2
		}
		c, err := net.Dial("tcp", *server)
		if err != nil {
			return 1
		}
		c.Close()
		fmt.Println("warming up...") // non-JSON output is tolerated
		r := benchkit.Result{System: "metaq", Workload: wl, MsgSize: *size}
		r.SetThroughput(5000, time.Second)
		benchkit.WriteJSON(os.Stdout, r)
		return 0
	}
	return 2
}

func TestMetaqINI(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Topics = 3
	ini := metaqINI(cfg, "/d", 1234, wPubDurable)
	for _, want := range []string{"serverPort=1234\n", "bindHost=127.0.0.1\n", "dashboardHttpPort=0\n", "dataPath=/d/data\n", "unflushThreshold=0\n", "zk.zkEnable=false\n", "[topic=bench]\n"} {
		if !strings.Contains(ini, want) {
			t.Errorf("durable ini lacks %q:\n%s", want, ini)
		}
	}
	if ini := metaqINI(cfg, "/d", 1, wPubAsync); strings.Contains(ini, "unflushThreshold") {
		t.Error("async ini must keep MetaQ's default flush")
	}
	if ini := metaqINI(cfg, "/d", 1, wTopics); !strings.Contains(ini, "[topic=bench-0]") || !strings.Contains(ini, "[topic=bench-2]") || strings.Contains(ini, "[topic=bench-3]") {
		t.Errorf("topics ini:\n%s", ini)
	}
	if ini := metaqINI(cfg, "/d", 1, wParts); !strings.Contains(ini, "[topic=bench-p]\nnumPartitions=10000\n") {
		t.Errorf("partitions ini:\n%s", ini)
	}
	args := strings.Join(MetaqBenchArgs(cfg, wE2E, "127.0.0.1:9", 42), " ")
	if args != "bench e2e --json --server 127.0.0.1:9 --server-pid 42 --topic bench --msg-size 100 --conns 1 --window 1000 --duration 10s --pairs 5 --count 1000000 --rate 1000 --topics 3 --partitions 10000 --batch 1000 --batch-inflight 5" {
		t.Errorf("args: %s", args)
	}
}

func TestRunMetaqWithFake(t *testing.T) {
	t.Setenv("PEERBENCH_FAKE_METAQ", "1")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.MetaqBin = exe
	cfg.TmpDir = t.TempDir()
	cfg.Duration = time.Second
	sys, _ := Lookup("metaq")
	for _, wl := range []string{wPubAsync, wParts} {
		r := Run(context.Background(), cfg, sys, wl)
		if r.Error != "" || r.System != "metaq" || r.Workload != wl || r.Msgs != 5000 || r.MsgsPerSec != 5000 {
			t.Fatalf("%s: %+v", wl, r)
		}
		if !strings.Contains(r.Notes, "server CPU measured over the whole client run") {
			t.Errorf("notes: %q", r.Notes)
		}
	}
	cfg.MetaqBin = "/nonexistent/metaq"
	if r := Run(context.Background(), cfg, sys, wPubAsync); !strings.Contains(r.Error, "not found") {
		t.Fatalf("missing binary: %+v", r)
	}
	if entries, _ := os.ReadDir(cfg.TmpDir); len(entries) != 0 {
		t.Errorf("data directories left behind: %v", entries)
	}
}
