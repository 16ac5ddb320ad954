package conf

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestSampleServerIni loads the shipped conf/server.ini: it must run as-is
// on a laptop.
func TestSampleServerIni(t *testing.T) {
	t.Parallel()
	c, err := Load("server.ini")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("the sample has warnings:\n%s", strings.Join(c.Warnings, "\n"))
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	s := c.System
	if s.BrokerID != 0 || s.ServerPort != 8123 || s.HostName != "127.0.0.1" || s.BindHost != "127.0.0.1" {
		t.Errorf("system = %+v", s)
	}
	if want := filepath.Join(root, "run", "data"); s.DataPath != want || s.DataLogPath != want {
		t.Errorf("dataPath = %q, dataLogPath = %q, want %q (the project's run/ directory)", s.DataPath, s.DataLogPath, want)
	}
	if s.MaxSegmentSize != DefaultMaxSegmentSize || s.MaxTransferSize != DefaultMaxTransferSize ||
		s.MaxMessageSize != DefaultMaxMessageSize || s.IndexFileSize != DefaultIndexFileSize ||
		s.DeletePolicy.String() != DefaultDeletePolicy || fmt.Sprint(s.DeleteWhen) != DefaultDeleteWhen ||
		!s.SyncFlush() || s.UnflushInterval != DefaultUnflushInterval || s.IdleTimeout != DefaultIdleTimeout {
		t.Errorf("system = %+v", s)
	}
	if !c.ZK.Enable || c.ZK.Connect != "localhost:2181" || c.ZK.Root != "/meta" {
		t.Errorf("zookeeper = %+v", c.ZK)
	}
	if got := strings.Join(c.ExplicitTopics(), ","); got != "test,meta-test" {
		t.Errorf("explicit topics = %q", got)
	}
	if tp, ok := c.Topic("%RETRY%g"); !ok || tp.AcceptPublish || !tp.AcceptSubscribe || tp.NumPartitions != 1 {
		t.Errorf("Topic(%%RETRY%%g) = %+v, %v: want a readable system topic that refuses puts", tp, ok)
	}
	for _, name := range []string{"test", "meta-test", "bench", "demo-1"} {
		tp, ok := c.Topic(name)
		if !ok || !tp.AcceptPublish || !tp.AcceptSubscribe || tp.NumPartitions < 1 {
			t.Errorf("Topic(%q) = %+v, %v", name, tp, ok)
		}
	}
	if tp, _ := c.Topic("bench"); tp.Pattern != "*" {
		t.Errorf("bench accepted by %q, want the catch-all", tp.Pattern)
	}
}

// TestMetaQServerIni loads server.ini files written the way MetaQ 1.4
// shipped them (testdata/metaq-1.4-*.ini).
func TestMetaQServerIni(t *testing.T) {
	t.Parallel()
	t.Run("sample.server.ini", func(t *testing.T) {
		c, err := Load("testdata/metaq-1.4-sample.ini")
		if err != nil {
			t.Fatal(err)
		}
		s := c.System
		if s.BrokerID != 0 || s.HostName == "" || s.NumPartitions != 1 || s.ServerPort != 8123 ||
			s.UnflushThreshold != 1000 || s.UnflushInterval != 10*time.Second || s.MaxSegmentSize != 1<<30 ||
			s.MaxTransferSize != 1<<20 || s.GetProcessThreadCount != 80 || s.PutProcessThreadCount != 80 ||
			s.DeletePolicy != (Retention{Delete: true, Keep: 168 * time.Hour}) || s.MaxCheckpoints != 3 ||
			s.CheckpointInterval != time.Hour || s.MaxTxTimeoutTimerCapacity != 30000 || s.MaxTxTimeout != time.Minute ||
			s.FlushTxLogAtCommit != 1 || !s.AcceptPublish || !s.AcceptSubscribe || s.UpdateConsumerOffsets || !s.Stat {
			t.Errorf("system = %+v", s)
		}
		if home, err := os.UserHomeDir(); err == nil && s.DataPath != filepath.Join(home, "meta") {
			t.Errorf("blank dataPath = %q, want ~/meta", s.DataPath)
		}
		tp, ok := c.Topic("test")
		if !ok || tp.NumPartitions != 10 || !tp.Stat || tp.DeletePolicy != s.DeletePolicy ||
			tp.UnflushInterval != s.UnflushInterval || fmt.Sprint(tp.DeleteWhen) != "0 0 6,18 * * ?" {
			t.Errorf("topic test = %+v", tp)
		}
		if _, ok := c.Topic("meta-test"); ok {
			t.Error("meta-test accepted without a section")
		}
		// Warned: the two thread pools and loadMessageStoresInParallel.
		w := strings.Join(c.Warnings, "\n")
		for _, k := range []string{"getProcessThreadCount", "putProcessThreadCount", "loadMessageStoresInParallel"} {
			if !strings.Contains(w, k) {
				t.Errorf("no warning for %s:\n%s", k, w)
			}
		}
		if len(c.Warnings) != 3 {
			t.Errorf("warnings:\n%s", w)
		}
	})
	t.Run("server-wrapper server.ini", func(t *testing.T) {
		c, err := Load("testdata/metaq-1.4-wrapper.ini")
		if err != nil {
			t.Fatal(err)
		}
		if !c.System.SyncFlush() || len(c.Warnings) != 0 || strings.Join(c.ExplicitTopics(), ",") != "test,meta-test" {
			t.Errorf("config = %+v, warnings %q", c.System, c.Warnings)
		}
	})
	t.Run("slave.ini", func(t *testing.T) {
		c, err := Load("testdata/metaq-1.4-slave.ini")
		if err != nil {
			t.Fatal(err)
		}
		s := c.System
		if s.BrokerID != 1111 || s.HostName != "test.localhost" || s.NumPartitions != 10 || s.ServerPort != 8124 ||
			s.DataPath != "/home/admin" || s.UnflushThreshold != 10000 || s.UnflushInterval != 100*time.Second ||
			s.DeletePolicy.Keep != 999*time.Hour {
			t.Errorf("system = %+v", s)
		}
		if c.ZK.Connect != "localhost:2183" || c.ZK.ConnectionTimeout != 40*time.Second || c.ZK.SessionTimeout != 30*time.Second {
			t.Errorf("zk = %+v", c.ZK)
		}
		if c.Slave.ID != 0 || c.Slave.Group != "meta-slave-group" {
			t.Errorf("slave = %+v", c.Slave)
		}
		t1, _ := c.Topic("test1")
		t2, _ := c.Topic("test2")
		if t1.NumPartitions != 11 || t1.Stat || t1.DeletePolicy.Keep != 77*time.Hour || t1.Filters["meta-example"] == "" ||
			t2.NumPartitions != 13 || !t2.Stat || t2.DeletePolicy.Keep != 999*time.Hour {
			t.Errorf("test1 = %+v\ntest2 = %+v", t1, t2)
		}
	})
}

// TestDocsListEveryKey checks that docs/configuration.md documents every
// key metaq accepts, and that the sample's keys are all known.
func TestDocsListEveryKey(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	var keys []string
	for _, tbl := range [][]keyDef{systemKeys, zkKeys, slaveKeys, replicationKeys, securityKeys} {
		keys = append(keys, keyNames(tbl)...)
	}
	for _, d := range topicKeys {
		keys = append(keys, d.name)
	}
	keys = append(keys, "group.<name>")
	for _, k := range keys {
		if !strings.Contains(text, "| `"+k+"`") {
			t.Errorf("docs/configuration.md has no table row for `%s`", k)
		}
	}
	// Every key the docs' tables name is a key metaq knows.
	known := map[string]bool{}
	for _, k := range keys {
		known[k] = true
	}
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)`").FindAllStringSubmatch(text, -1) {
		if !known[m[1]] {
			t.Errorf("docs/configuration.md documents unknown key %q", m[1])
		}
	}
}
