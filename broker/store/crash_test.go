package store

import (
	"bufio"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math/rand"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/metaqgo/metaq/protocol"
)

// The crash test kills a real writer process with SIGKILL in the middle of
// appends, many times, and checks that every acknowledged message survives
// intact at its acknowledged offset.
//
// The child is this test binary re-executed with -test.run=^TestCrashHelper$
// and METAQ_STORE_CRASH_HELPER=<dir>. It appends from 8 goroutines and
// prints one line per acknowledged message:
//
//	ack <topic> <partition> <queueOffset> <msgId> <crc32 of data> <len>
//
// In sync mode (group commit) a message is acknowledged when Append returns.
// In async mode (METAQ_STORE_CRASH_MODE=async) the writer appends a few
// messages, then calls WriteOut and acknowledges them, as the broker does per
// batch: a process crash must not lose them (they are in the page cache).

const (
	crashHelperEnv = "METAQ_STORE_CRASH_HELPER"
	crashModeEnv   = "METAQ_STORE_CRASH_MODE"
)

func crashConfig(dir string, async bool) Config {
	flush := 0 // sync flush, group commit
	if async {
		flush = 50
	}
	return Config{
		Dir:                dir,
		BrokerID:           3,
		SegmentSize:        32 << 10, // rolls often
		IndexFileSize:      512,
		UnflushThreshold:   flush,
		CheckpointInterval: 20 * time.Millisecond,
		KeyIndexSlots:      64,
		KeyIndexEntries:    512,
		Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
		// Zero-fill ahead of the writer (on in sync mode) close enough to be
		// exercised with these small segments, fence included.
		prefillGap:   4 << 10,
		prefillChunk: 8 << 10,
		stageSize:    16 << 10, // appends wait for staging room now and then
	}
}

func TestCrashHelper(t *testing.T) {
	dir := os.Getenv(crashHelperEnv)
	if dir == "" {
		t.Skip("helper process of TestCrashKill9")
	}
	async := os.Getenv(crashModeEnv) == "async"
	s, err := Open(crashConfig(dir, async))
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(out, "ready")
	out.Flush()
	fail := func(err error) {
		mu.Lock()
		fmt.Fprintf(out, "error %v\n", err)
		out.Flush()
		mu.Unlock()
	}
	for w := 0; w < 8; w++ {
		go func(w int) {
			rng := rand.New(rand.NewSource(time.Now().UnixNano() + int64(w)))
			var acks []string
			for i := 0; ; i++ {
				topic := fmt.Sprintf("c%d", w%2)
				part := int32(rng.Intn(4))
				data := make([]byte, rng.Intn(700))
				rng.Read(data)
				r, err := s.Append(&Message{Topic: topic, Partition: part, Data: data,
					Properties: []byte(fmt.Sprintf("tag=t%d&keys=w%d-%d", w, w, i))})
				if err != nil {
					fail(err)
					return
				}
				acks = append(acks, fmt.Sprintf("ack %s %d %d %d %d %d\n", topic, part, r.QueueOffset, r.MsgID, crc32.ChecksumIEEE(data), len(data)))
				if async {
					if rng.Intn(4) != 0 {
						continue // a batch of appends, then one WriteOut
					}
					if err := s.WriteOut(); err != nil {
						fail(err)
						return
					}
				}
				mu.Lock()
				for _, a := range acks {
					out.WriteString(a)
				}
				out.Flush() // acknowledged: the parent must learn it before we die
				mu.Unlock()
				acks = acks[:0]
			}
		}(w)
	}
	time.Sleep(30 * time.Second) // the parent kills us long before
	os.Exit(3)
}

type crashKey struct {
	topic  string
	part   int32
	offset int64
}

type crashAck struct {
	msgID int64
	crc   uint32
	n     int
}

func TestCrashKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	t.Run("sync", func(t *testing.T) { crashKill9(t, false) })
	t.Run("async", func(t *testing.T) { crashKill9(t, true) })
}

func crashKill9(t *testing.T, async bool) {
	dir := t.TempDir()
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	t.Logf("seed %d", seed)
	acked := map[crashKey]crashAck{}
	const iterations = 20
	start := time.Now()
	for it := 0; it < iterations; it++ {
		lines := runAndKill(t, dir, async, time.Duration(5+rng.Intn(150))*time.Millisecond)
		n := 0
		for _, l := range lines {
			if strings.HasPrefix(l, "error") {
				t.Fatalf("iteration %d: child: %s", it, l)
			}
			var k crashKey
			var a crashAck
			if _, err := fmt.Sscanf(l, "ack %s %d %d %d %d %d", &k.topic, &k.part, &k.offset, &a.msgID, &a.crc, &a.n); err != nil {
				continue
			}
			if old, ok := acked[k]; ok && old != a {
				t.Fatalf("iteration %d: offset %v acknowledged twice for different messages", it, k)
			}
			acked[k] = a
			n++
		}
		// Reopen (crash recovery) and check every message acknowledged so far.
		s, err := Open(crashConfig(dir, async))
		if err != nil {
			t.Fatalf("iteration %d: reopen: %v", it, err)
		}
		verifyCrashAcks(t, s, acked)
		checkSegments(t, s)
		// The tail is clean: appends continue at max on every partition.
		for _, topic := range []string{"c0", "c1"} {
			for p := int32(0); p < 4; p++ {
				max := s.MaxOffset(topic, p)
				data := []byte(fmt.Sprintf("parent %d", it))
				r, err := s.Append(&Message{Topic: topic, Partition: p, Data: data})
				if err != nil || r.QueueOffset != max {
					t.Fatalf("iteration %d: append after recovery: %v offset %d max %d", it, err, r.QueueOffset, max)
				}
				acked[crashKey{topic, p, r.QueueOffset}] = crashAck{r.MsgID, crc32.ChecksumIEEE(data), len(data)}
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("iteration %d: %d new acks, %d verified", it, n, len(acked))
	}
	t.Logf("%d kills, %d acknowledged messages verified in %v", iterations, len(acked), time.Since(start))
}

// runAndKill starts the helper, lets it append for d after it is ready,
// kills it with SIGKILL and returns the complete lines it printed.
func runAndKill(t *testing.T, dir string, async bool, d time.Duration) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashHelperEnv+"="+dir)
	if async {
		cmd.Env = append(cmd.Env, crashModeEnv+"=async")
	}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	var lines []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		r := bufio.NewReader(stdout)
		first := true
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				if first {
					close(ready)
				}
				return // a partial last line is dropped: not acknowledged
			}
			l = strings.TrimSuffix(l, "\n")
			if first && l == "ready" {
				first = false
				close(ready)
				continue
			}
			lines = append(lines, l)
		}
	}()
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("helper did not start")
	}
	time.Sleep(d) // the random moment of the crash
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	<-done
	return lines
}

func verifyCrashAcks(t *testing.T, s *Store, acked map[crashKey]crashAck) {
	t.Helper()
	for k, a := range acked {
		r, err := s.Read(k.topic, k.part, k.offset, 1, nil)
		if err != nil || r.Status != ReadFound {
			t.Fatalf("acked %v lost: %v %v (max %d)", k, err, r, s.MaxOffset(k.topic, k.part))
		}
		rec, _, err := protocol.DecodeRecord(r.Bufs[0], 0)
		if err != nil || rec.MsgID != a.msgID || rec.QueueOffset != k.offset || len(rec.Data) != a.n ||
			crc32.ChecksumIEEE(rec.Data) != a.crc {
			t.Fatalf("acked %v damaged: %v", k, err)
		}
		r.Release()
	}
}
