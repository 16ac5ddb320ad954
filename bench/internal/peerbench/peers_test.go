package peerbench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/metaqgo/metaq/benchkit"
)

// TestPeersSmoke runs every peer configuration on every workload it supports
// for a fraction of a second. It needs bench/bin (bench/run.sh --no-metaq
// builds it) and redis-server, and is skipped without them or with -short.
func TestPeersSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	_, file, _, _ := runtime.Caller(0)
	bin := filepath.Join(filepath.Dir(file), "..", "..", "bin")
	for _, b := range []string{"nats-server", "nsqd"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Skipf("%s not built (bench/run.sh builds it)", b)
		}
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed")
	}
	cfg := DefaultConfig()
	cfg.BinDir = bin
	cfg.TmpDir = t.TempDir()
	cfg.Duration = 300 * time.Millisecond
	cfg.Count = 3000
	cfg.Topics = 20
	cfg.Rate = 2000
	cfg.Logf = t.Logf
	for _, sys := range Systems {
		if sys.Name == "metaq" {
			continue
		}
		for _, wl := range sys.Workloads {
			t.Run(sys.Name+"/"+wl, func(t *testing.T) {
				r := Run(context.Background(), cfg, sys, wl)
				if r.Error != "" {
					t.Fatal(r.Error)
				}
				if r.Msgs <= 0 || r.MsgsPerSec <= 0 || r.Seconds <= 0 || r.MsgSize != 100 {
					t.Fatalf("empty result %+v", r)
				}
				switch wl {
				case benchkit.WorkloadLatency, benchkit.WorkloadE2E:
					if r.P50us <= 0 || r.P99us < r.P50us || r.MaxUs < r.P999us {
						t.Fatalf("latency %+v", r)
					}
				case benchkit.WorkloadConsumeBacklog:
					if r.Msgs != cfg.Count {
						t.Fatalf("drained %d of %d", r.Msgs, cfg.Count)
					}
				case benchkit.WorkloadTopics1000:
					if r.Topics != cfg.Topics || r.DegradationRatio <= 0 || r.BaselineMsgsPerSec <= 0 || !strings.Contains(r.Notes, "5 alternating pairs") {
						t.Fatalf("topics %+v", r)
					}
				}
			})
		}
	}
	if entries, _ := os.ReadDir(cfg.TmpDir); len(entries) != 0 {
		t.Errorf("data directories left behind: %v", entries)
	}
}
