package conf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

// parse parses a test file named "test.ini" in dir (relative paths resolve
// against dir).
func parse(t *testing.T, text string) (*Config, error) {
	t.Helper()
	return Parse([]byte(text), filepath.Join(t.TempDir(), "test.ini"))
}

func mustParse(t *testing.T, text string) *Config {
	t.Helper()
	c, err := parse(t, text)
	if err != nil {
		t.Fatalf("Parse:\n%s\nerror: %v", text, err)
	}
	return c
}

func wantErr(t *testing.T, text string, subs ...string) error {
	t.Helper()
	_, err := parse(t, text)
	if err == nil {
		t.Fatalf("Parse:\n%s\nsucceeded, want an error containing %q", text, subs)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("Parse:\n%s\nerror:\n%v\nwant it to contain %q", text, err, s)
		}
	}
	return err
}

func TestMinimalConfigHasMetaQDefaults(t *testing.T) {
	t.Parallel()
	c := mustParse(t, "[system]\nbrokerId=3\n")
	d := Default(3)
	d.Path = c.Path
	d.Warnings = c.Warnings
	if !reflect.DeepEqual(c, d) {
		t.Errorf("Parse(brokerId only) differs from Default:\n got %+v\nwant %+v", c, d)
	}
	s := c.System
	checks := []struct {
		name      string
		got, want any
	}{
		{"brokerId", s.BrokerID, 3},
		{"serverPort", s.ServerPort, 8123},
		{"dashboardHttpPort", s.DashboardHTTPPort, 8120},
		{"numPartitions", s.NumPartitions, 1},
		{"unflushThreshold", s.UnflushThreshold, 1000},
		{"unflushInterval", s.UnflushInterval, 10 * time.Second},
		{"maxSegmentSize", s.MaxSegmentSize, int64(1 << 30)},
		{"maxTransferSize", s.MaxTransferSize, 1 << 20},
		{"maxMessageSize", s.MaxMessageSize, 4 << 20},
		{"indexFileSize", s.IndexFileSize, int64(20 << 20)},
		{"deletePolicy", s.DeletePolicy, Retention{Delete: true, Keep: 168 * time.Hour}},
		{"deleteWhen", fmt.Sprint(s.DeleteWhen), "0 0 6,18 * * ?"},
		{"acceptPublish", s.AcceptPublish, true},
		{"acceptSubscribe", s.AcceptSubscribe, true},
		{"stat", s.Stat, true},
		{"updateConsumerOffsets", s.UpdateConsumerOffsets, false},
		{"idleTimeout", s.IdleTimeout, 600 * time.Second},
		{"maxConnections", s.MaxConnections, 0},
		{"dashboardMaxConnections", s.DashboardMaxConnections, 2048},
		{"maxPendingPutBytes", s.MaxPendingPutBytes, int64(256 << 20)},
		{"putDataTimeoutMs", s.PutDataTimeout, 30 * time.Second},
		{"maxParkedGetsPerConnection", s.MaxParkedGets, 4096},
		{"bindHost", s.BindHost, ""},
		{"getProcessThreadCount", s.GetProcessThreadCount, 10 * runtime.NumCPU()},
		{"quartzThreadCount", s.QuartzThreadCount, 5},
		{"maxCheckpoints", s.MaxCheckpoints, 3},
		{"checkpointInterval", s.CheckpointInterval, time.Hour},
		{"maxTxTimeoutTimerCapacity", s.MaxTxTimeoutTimerCapacity, 30000},
		{"maxTxPerConnection", s.MaxTxPerConnection, 1024},
		{"maxTxTimeoutInSeconds", s.MaxTxTimeout, time.Minute},
		{"flushTxLogAtCommit", s.FlushTxLogAtCommit, 1},
		{"transactionCheckInterval", s.TransactionCheckInterval, time.Minute},
		{"transactionCheckMax", s.TransactionCheckMax, 15},
		{"zk.zkEnable", c.ZK.Enable, true},
		{"zk.zkConnect", c.ZK.Connect, "localhost:2181"},
		{"zk.zkRoot", c.ZK.Root, "/meta"},
		{"zk.zkSessionTimeoutMs", c.ZK.SessionTimeout, 30 * time.Second},
		{"zk.zkConnectionTimeoutMs", c.ZK.ConnectionTimeout, 30 * time.Second},
		{"zk.zkSyncTimeMs", c.ZK.SyncTime, 5 * time.Second},
		{"slaveId", c.Slave.ID, -1},
		{"slaveGroup", c.Slave.Group, "meta-slave-group"},
		{"slaveMaxDelayInMills", c.Slave.MaxDelay, 500 * time.Millisecond},
	}
	for _, ck := range checks {
		if !reflect.DeepEqual(ck.got, ck.want) {
			t.Errorf("%s = %v, want %v", ck.name, ck.got, ck.want)
		}
	}
	if s.HostName == "" || s.HostName != DefaultHostName() {
		t.Errorf("hostName = %q, want DefaultHostName() = %q", s.HostName, DefaultHostName())
	}
	if home, err := os.UserHomeDir(); err == nil && s.DataPath != filepath.Join(home, "meta") {
		t.Errorf("dataPath = %q, want ~/meta", s.DataPath)
	}
	if s.DataLogPath != s.DataPath {
		t.Errorf("dataLogPath = %q, want dataPath %q", s.DataLogPath, s.DataPath)
	}
	if len(c.Topics) != 0 || len(c.ExplicitTopics()) != 0 {
		t.Errorf("topics = %v", c.Topics)
	}
	if _, ok := c.Topic("test"); ok {
		t.Error("a config without [topic=…] sections accepts topic test")
	}
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "no [topic=…] section") {
		t.Errorf("warnings = %q", c.Warnings)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if !strings.HasSuffix(c.Path, "test.ini") {
		t.Errorf("Path = %q", c.Path)
	}
}

func TestDefault(t *testing.T) {
	t.Parallel()
	c := Default(7)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.System.BrokerID != 7 || c.System.ListenAddr() != ":8123" || c.System.SyncFlush() {
		t.Errorf("Default(7) = %+v", c.System)
	}
	c.System.HostName = "broker1.example"
	if got := c.System.AdvertisedAddr(); got != "broker1.example:8123" {
		t.Errorf("AdvertisedAddr = %q", got)
	}
	c.System.BindHost = "::1"
	if got := c.System.ListenAddr(); got != "[::1]:8123" {
		t.Errorf("ListenAddr = %q", got)
	}
}

// TestSystemKeys sets every [system] key and checks the parsed field.
func TestSystemKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	text := `[system]
brokerId = 12
hostName = broker-12.example.com
bindHost = 10.0.0.12
serverPort = 9000
dashboardHttpPort = 0
numPartitions = 4*2
dataPath = data
dataLogPath = /var/log/metaq-tx
unflushThreshold = -1
unflushInterval = 2s
maxSegmentSize = 64m
maxTransferSize = 512*1024
maxMessageSize = 1m
indexFileSize = 16*1024
deletePolicy = delete,7d
deleteWhen = 0 30 3 * * ?
acceptPublish = false
acceptSubscribe = FALSE
stat = false
updateConsumerOffsets = true
idleTimeout = 90
maxConnections = 10000
slaveId = 2
getProcessThreadCount = 80
putProcessThreadCount = 80
loadMessageStoresInParallel = true
quartzThreadCount = 2
appClassPath = /opt/meta/provided/
maxCheckpoints = 5
checkpointInterval = 60000
maxTxTimeoutTimerCapacity = 100
maxTxTimeoutInSeconds = 30
flushTxLogAtCommit = 2
transactionCheckInterval = 5000
transactionCheckMax = 3
maxPendingPutBytes = 64m
putDataTimeoutMs = 5000
maxParkedGetsPerConnection = 100000
`
	c, err := Parse([]byte(text), filepath.Join(dir, "server.ini"))
	if err != nil {
		t.Fatal(err)
	}
	s := c.System
	want := System{
		BrokerID: 12, HostName: "broker-12.example.com", BindHost: "10.0.0.12", ServerPort: 9000,
		DashboardHTTPPort: 0, NumPartitions: 8, DataPath: filepath.Join(dir, "data"), DataLogPath: "/var/log/metaq-tx",
		UnflushThreshold: -1, UnflushInterval: 2 * time.Second, MaxSegmentSize: 64 << 20, MaxTransferSize: 512 << 10,
		MaxMessageSize: 1 << 20, IndexFileSize: 16 << 10, DeletePolicy: Retention{Delete: true, Keep: 168 * time.Hour},
		DeleteWhen: s.DeleteWhen, AcceptPublish: false, AcceptSubscribe: false, Stat: false, UpdateConsumerOffsets: true,
		DashboardMaxConnections: DefaultDashboardMaxConnections, MetricsMaxTopics: DefaultMetricsMaxTopics, MetricsMaxLagSeries: DefaultMetricsMaxLagSeries, MetricsLagInterval: DefaultMetricsLagInterval,
		IdleTimeout: 90 * time.Second, MaxConnections: 10000, MaxPendingPutBytes: 64 << 20, PutDataTimeout: 5 * time.Second, MaxParkedGets: 100000,
		GetProcessThreadCount: 80, PutProcessThreadCount: 80, LoadMessageStoresInParallel: true, QuartzThreadCount: 2,
		AppClassPath: "/opt/meta/provided/", MaxCheckpoints: 5, CheckpointInterval: time.Minute,
		MaxTxTimeoutTimerCapacity: 100, MaxTxPerConnection: 1024, MaxTxTimeout: 30 * time.Second, FlushTxLogAtCommit: 2,
		TransactionCheckInterval: 5 * time.Second, TransactionCheckMax: 3,
	}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("system:\n got %+v\nwant %+v", s, want)
	}
	if fmt.Sprint(s.DeleteWhen) != "0 30 3 * * ?" {
		t.Errorf("deleteWhen = %v", s.DeleteWhen)
	}
	if c.Slave.ID != 2 || !s.SyncFlush() {
		t.Errorf("slaveId = %d, SyncFlush = %v", c.Slave.ID, s.SyncFlush())
	}
	// Five ignored keys, each warned about once, with file and line.
	if len(c.Warnings) != 6 { // + "no [topic=…] section"
		t.Errorf("warnings:\n%s", strings.Join(c.Warnings, "\n"))
	}
	for _, w := range c.Warnings {
		if !strings.Contains(w, "server.ini:") {
			t.Errorf("warning without file:line: %q", w)
		}
	}
	if !strings.Contains(strings.Join(c.Warnings, "\n"), "server.ini:25: [system] getProcessThreadCount is accepted for MetaQ compatibility but ignored") {
		t.Errorf("warnings:\n%s", strings.Join(c.Warnings, "\n"))
	}
}

func TestZooKeeperAndSlaveKeys(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `[system]
brokerId=1
[zookeeper]
zk.zkEnable=false
zk.zkConnect=zk1:2181,zk2:2181,zk3/metaq
zk.zkRoot=/metaq/prod
zk.zkSessionTimeoutMs=6000
zk.zkConnectionTimeoutMs=10s
zk.zkSyncTimeMs=0
diamondZKDataId=metamorphosis.testZkConfig
diamondZKGroup=DEFAULT_GROUP
[slave]
slaveId=1
slaveGroup=my-slaves
slaveMaxDelayInMills=1000
autoSyncMasterConfig=true
[topic=t]
`)
	wantZK := ZK{Enable: false, Connect: "zk1:2181,zk2:2181,zk3/metaq", Root: "/metaq/prod",
		SessionTimeout: 6 * time.Second, ConnectionTimeout: 10 * time.Second, SyncTime: 0}
	if c.ZK != wantZK {
		t.Errorf("zk = %+v, want %+v", c.ZK, wantZK)
	}
	wantSlave := Slave{ID: 1, Group: "my-slaves", MaxDelay: time.Second, AutoSyncMasterConfig: true}
	if c.Slave != wantSlave {
		t.Errorf("slave = %+v, want %+v", c.Slave, wantSlave)
	}
	if len(c.Warnings) != 2 || !strings.Contains(c.Warnings[0], "Diamond") {
		t.Errorf("warnings = %q", c.Warnings)
	}
}

func TestUnknownKeySuggestion(t *testing.T) {
	t.Parallel()
	text := "[system]\nbrokerId=0\nunflushThresold=10\n"
	err := wantErr(t, text, `test.ini:3: unknown key "unflushThresold" in [system]; did you mean "unflushThreshold"?`)
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %T is not a *conf.Error", err)
	}
	if ce.Line != 3 || ce.Section != "system" || ce.Key != "unflushThresold" || !strings.HasSuffix(ce.File, "test.ini") {
		t.Errorf("Error = %+v", ce)
	}

	cases := []struct{ text, want string }{
		{"[system]\nbrokerid=0\n", `unknown key "brokerid" in [system]; did you mean "brokerId"?`},
		{"[system]\nbrokerId=0\nserverport=1\n", `did you mean "serverPort"?`},
		{"[system]\nbrokerId=0\nmaxSegmentSzie=1g\n", `did you mean "maxSegmentSize"?`},
		{"[system]\nbrokerId=0\ndeletePolicies=delete,1\n", `did you mean "deletePolicy"?`},
		{"[system]\nbrokerId=0\nfoo=1\n", `unknown key "foo" in [system] (known keys: brokerId, hostName`},
		{"[system]\nbrokerId=0\n[zookeeper]\nzk.zkConect=x:1\n", `unknown key "zk.zkConect" in [zookeeper]; did you mean "zk.zkConnect"?`},
		{"[system]\nbrokerId=0\n[zookeeper]\nzkConnect=x:1\n", `did you mean "zk.zkConnect"?`},
		{"[system]\nbrokerId=0\n[topic=t]\nnumPartition=2\n", `unknown key "numPartition" in [topic=t]; did you mean "numPartitions"?`},
		{"[system]\nbrokerId=0\n[topic=t]\nacceptPublsh=false\n", `did you mean "acceptPublish"?`},
		{"[system]\nbrokerId=0\n[slave]\nslaveID=1\n", `did you mean "slaveId"?`},
		// A key of another section says where it belongs.
		{"[system]\nbrokerId=0\nzk.zkConnect=x:1\n", `key "zk.zkConnect" is not allowed in [system]; it belongs in [zookeeper]`},
		{"[system]\nbrokerId=0\n[topic=t]\nbrokerId=1\n", `key "brokerId" is not allowed in [topic=t]; it belongs in [system]`},
		{"[system]\nbrokerId=0\n[topic=t]\nmaxSegmentSize=1g\n", `it belongs in [system]`},
		{"[system]\nbrokerId=0\n[zookeeper]\nnumPartitions=1\n", `belongs in [system] or [topic=…]`},
		{"brokerId=0\n[system]\nbrokerId=0\n", `test.ini:1: key "brokerId" is outside any section; put it under [system]`},
	}
	for _, tc := range cases {
		wantErr(t, tc.text, tc.want)
	}
}

func TestUnknownSection(t *testing.T) {
	t.Parallel()
	cases := []struct{ section, want string }{
		{"systm", "did you mean [system]?"},
		{"System", "did you mean [system]?"},
		{"zookeper", "did you mean [zookeeper]?"},
		{"zk", "did you mean [topic=zk]?"},
		{"slaves", "did you mean [slave]?"},
		{"replicaton", "did you mean [replication]?"},
		{"securty", "did you mean [security]?"},
		{"topics=test", "did you mean [topic=test]?"},
		{"Topic=test", "did you mean [topic=test]?"},
		{"topic test", "did you mean [topic=test]?"},
		{"topic:test", "did you mean [topic=test]?"},
		{"test", "did you mean [topic=test]?"},
		{"a b c", "unknown section [a b c] (known: [system], [zookeeper], [slave], [replication], [security], [topic=<name>])"},
	}
	for _, tc := range cases {
		text := "[system]\nbrokerId=0\n\n[" + tc.section + "]\n"
		wantErr(t, text, "test.ini:4: unknown section ["+tc.section+"]", tc.want)
	}
}

func TestInvalidValues(t *testing.T) {
	t.Parallel()
	cases := []struct {
		key, value, want string
	}{
		{"brokerId", "x", `[system] brokerId: invalid value "x": want an integer`},
		{"brokerId", "32768", "brokerId: 32768 is out of range 0..32767"},
		{"brokerId", "-1", "out of range 0..32767"},
		{"serverPort", "70000", "serverPort: 70000 is out of range 0..65535"},
		{"serverPort", "http", `serverPort: invalid value "http"`},
		{"dashboardHttpPort", "8123", "dashboardHttpPort: 8123 is also serverPort"},
		{"numPartitions", "0", "numPartitions: 0 is out of range 1..65535"},
		{"numPartitions", "99999999999", "out of range"},
		{"unflushThreshold", "1k", `unflushThreshold: invalid value "1k"`},
		{"unflushInterval", "0", "unflushInterval: must be > 0"},
		{"unflushInterval", "soon", `unflushInterval: invalid value "soon": want milliseconds (e.g. 10000) or a duration with a unit (e.g. 10s)`},
		{"maxSegmentSize", "1.5g", `maxSegmentSize: invalid value "1.5g": want a byte count`},
		{"maxSegmentSize", "1m", "maxSegmentSize: 1048576 cannot hold the largest record: need at least maxMessageSize (4194304) + 326 = 4194630 bytes"},
		{"maxSegmentSize", "1t", "larger than 4294967295 (4g - 1"},
		{"maxSegmentSize", "4g", "maxSegmentSize: 4294967296 is larger than 4294967295 (4g - 1, e.g. 4095m)"},
		{"maxMessageSize", "0", "maxMessageSize: 0 is out of range"},
		{"maxMessageSize", "2g", "maxMessageSize: invalid value \"2g\": 2147483648 is too large"},
		{"maxTransferSize", "0", "maxTransferSize: 0 is out of range"},
		{"indexFileSize", "1000", "indexFileSize: 1000 must be a multiple of 16"},
		{"indexFileSize", "0", "multiple of 16"},
		{"deletePolicy", "delete,0", `deletePolicy: invalid value "delete,0": age must be > 0`},
		{"deletePolicy", "remove,1", `unknown policy "remove"`},
		{"deleteWhen", "0 0 6 * *", `deleteWhen: invalid value "0 0 6 * *"`},
		{"deleteWhen", "0 0 25 * * ?", "hour \"25\": 25 is out of range 0-23"},
		{"acceptPublish", "yes", `acceptPublish: invalid value "yes": want true or false`},
		{"idleTimeout", "-5", "idleTimeout: invalid value \"-5\": must not be negative"},
		{"maxConnections", "-1", "maxConnections: must not be negative"},
		{"maxPendingPutBytes", "1k", "maxPendingPutBytes: 1024 is smaller than maxMessageSize"},
		{"putDataTimeoutMs", "-1", "putDataTimeoutMs: invalid value \"-1\": must not be negative"},
		{"hostName", "my host", "hostName: \"my host\" is not a host name"},
		{"hostName", "host:8123", "no port here"},
		{"bindHost", "0.0.0.0/0", "bindHost: \"0.0.0.0/0\" is not a host name"},
		{"flushTxLogAtCommit", "3", "flushTxLogAtCommit: 3: want 0 (OS decides), 1 (every commit) or 2 (every second)"},
		{"maxCheckpoints", "0", "maxCheckpoints: must be >= 1"},
		{"slaveId", "-2", "slaveId: -2 is out of range -1..32767"},
	}
	for _, tc := range cases {
		text := "[system]\n"
		if tc.key != "brokerId" {
			text += "brokerId=1\n"
		}
		text += tc.key + "=" + tc.value + "\n"
		err := wantErr(t, text, tc.want)
		if err != nil && !strings.Contains(err.Error(), "test.ini:") {
			t.Errorf("%s=%s: error without a file name: %v", tc.key, tc.value, err)
		}
	}
	// The largest segment the record format can end with a BLANK filler.
	if c := mustParse(t, "[system]\nbrokerId=1\nmaxSegmentSize=4294967295\n"); c.System.MaxSegmentSize != 1<<32-1 {
		t.Errorf("maxSegmentSize=4294967295: got %d", c.System.MaxSegmentSize)
	}
	zk := []struct{ text, want string }{
		{"zk.zkConnect=", ""}, // blank = default: valid
		{"zk.zkConnect=host:port", `zk.zkConnect: "host:port": bad port`},
		{"zk.zkConnect=a:1,,b:2", "empty server"},
		{"zk.zkConnect=a:1/meta/", "chroot"},
		{"zk.zkRoot=meta", `zk.zkRoot: "meta": want an absolute ZooKeeper path`},
		{"zk.zkRoot=/", "want an absolute ZooKeeper path"},
		{"zk.zkRoot=/meta/", "no trailing /"},
		{"zk.zkRoot=/a/../b", ". and .. are not allowed"},
		{"zk.zkSessionTimeoutMs=0", "zk.zkSessionTimeoutMs: must be > 0"},
		{"zk.zkEnable=maybe", `zk.zkEnable: invalid value "maybe"`},
	}
	for _, tc := range zk {
		text := "[system]\nbrokerId=1\n[zookeeper]\n" + tc.text + "\n[topic=t]\n"
		if tc.want == "" {
			mustParse(t, text)
			continue
		}
		wantErr(t, text, "[zookeeper] "+strings.SplitN(tc.text, "=", 2)[0], tc.want)
	}
	// A disabled ZooKeeper does not need a connect string.
	mustParse(t, "[system]\nbrokerId=1\n[zookeeper]\nzk.zkEnable=false\nzk.zkConnect=host:port\n")
}

func TestBrokerIDRequired(t *testing.T) {
	t.Parallel()
	wantErr(t, "[system]\nserverPort=8123\n", "test.ini:1: [system] brokerId is required")
	wantErr(t, "[system]\nbrokerId=\n", "test.ini:2: [system] brokerId is required")
	wantErr(t, "[system]\nbrokerId=   \n", "[system] brokerId is required")
	wantErr(t, "[zookeeper]\nzk.zkConnect=a:1\n", "test.ini: missing [system] section with brokerId")
	wantErr(t, "", "missing [system] section")
	// 0 and 32767 are the bounds.
	mustParse(t, "[system]\nbrokerId=0\n")
	mustParse(t, "[system]\nbrokerId=32767\n")
}

func TestSyntaxErrors(t *testing.T) {
	t.Parallel()
	cases := []struct{ text, want string }{
		{"[system\nbrokerId=0\n", `test.ini:1: unclosed section header "[system"`},
		{"[system]\nbrokerId=0\njunk\n", `test.ini:3: line "junk" is not a key=value pair`},
		{"[system]\nbrokerId=0\n=5\n", `test.ini:3: empty key name`},
		{"[]\n", "empty section name"},
		{"[system]\nbrokerId=0\n[system]\nbrokerId=1\n", "test.ini:3: duplicate section [system] (first at line 1)"},
		{"[system]\nbrokerId=0\n[topic=a]\n[topic = a]\n", "test.ini:4: duplicate section [topic=a] (first at line 3)"},
		{"[system]\nbrokerId=0\nbrokerId=1\n", `test.ini:3: duplicate key "brokerId" in [system] (first at line 2)`},
		{"[system]\nbrokerId=0\n[topic=a]\nstat=true\nstat=false\n", `test.ini:5: duplicate key "stat" in [topic=a] (first at line 4)`},
	}
	for _, tc := range cases {
		wantErr(t, tc.text, tc.want)
	}
}

func TestAllErrorsReported(t *testing.T) {
	t.Parallel()
	text := `[system]
brokerId=99999
serverPort=x
unflushThresold=1
[zookeeper]
zk.zkRoot=meta
[topic=bad/name]
[topic=ok]
numPartitions=0
`
	err := wantErr(t, text,
		"test.ini:2: [system] brokerId: 99999 is out of range",
		"test.ini:3: [system] serverPort: invalid value",
		"test.ini:4: unknown key \"unflushThresold\"",
		"test.ini:6: [zookeeper] zk.zkRoot",
		"test.ini:7: [topic=bad/name]: invalid topic name \"bad/name\"",
		"test.ini:9: [topic=ok] numPartitions: 0 is out of range",
	)
	if n := strings.Count(err.Error(), "serverPort"); n != 1 {
		t.Errorf("serverPort reported %d times:\n%v", n, err)
	}
	// Errors come in line order.
	msg := err.Error()
	if strings.Index(msg, ":2:") > strings.Index(msg, ":9:") {
		t.Errorf("errors not in line order:\n%s", msg)
	}
}

func TestTopicSections(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `[system]
brokerId=0
numPartitions=3
deletePolicy=delete,48
unflushThreshold=100
acceptSubscribe=false
stat=false

[topic=orders]
numPartitions=8
deletePolicy=delete,10m
deleteWhen=@every 1m
acceptPublish=false
acceptSubscribe=true
unflushThreshold=0
unflushInterval=50
stat=true
dataPath=/elsewhere
group.billing=com.example.BillingFilter
group.audit=

[topic=log-*]
numPartitions=2

[topic = plain]
`)
	if got := c.ExplicitTopics(); !reflect.DeepEqual(got, []string{"orders", "plain"}) {
		t.Errorf("ExplicitTopics = %q", got)
	}
	if len(c.Topics) != 3 || c.Topics[1].Pattern != "log-*" || !c.Topics[1].Wildcard() || c.Topics[0].Wildcard() {
		t.Fatalf("Topics = %+v", c.Topics)
	}
	o, ok := c.Topic("orders")
	if !ok {
		t.Fatal("orders not accepted")
	}
	if o.Name != "orders" || o.Pattern != "orders" || o.NumPartitions != 8 ||
		o.DeletePolicy != (Retention{Delete: true, Keep: 10 * time.Minute}) || fmt.Sprint(o.DeleteWhen) != "@every 1m" ||
		o.AcceptPublish || !o.AcceptSubscribe || o.UnflushThreshold != 0 || o.UnflushInterval != 50*time.Millisecond ||
		!o.Stat || o.DataPath != "/elsewhere" || o.Line != 9 ||
		!reflect.DeepEqual(o.Filters, map[string]string{"billing": "com.example.BillingFilter"}) {
		t.Errorf("orders = %+v", o)
	}
	// Inherited from [system].
	p, ok := c.Topic("plain")
	if !ok {
		t.Fatal("plain not accepted")
	}
	if p.NumPartitions != 3 || p.DeletePolicy.Keep != 48*time.Hour || p.UnflushThreshold != 100 ||
		!p.AcceptPublish || p.AcceptSubscribe || p.Stat || p.DataPath != c.System.DataPath ||
		fmt.Sprint(p.DeleteWhen) != DefaultDeleteWhen || p.Filters != nil {
		t.Errorf("plain = %+v", p)
	}
	l, ok := c.Topic("log-app")
	if !ok || l.Name != "log-app" || l.Pattern != "log-*" || l.NumPartitions != 2 {
		t.Errorf("log-app = %+v, %v", l, ok)
	}
	if _, ok := c.Topic("other"); ok {
		t.Error("other accepted")
	}
	// The filters map of a result is a copy.
	o.Filters["x"] = "y"
	if o2, _ := c.Topic("orders"); len(o2.Filters) != 1 {
		t.Error("Topic returned a shared Filters map")
	}
	// Warnings for the ignored dataPath and group.billing (not the blank group.audit).
	if len(c.Warnings) != 2 || !strings.Contains(c.Warnings[0], "test.ini:18: [topic=orders] dataPath is accepted") ||
		!strings.Contains(c.Warnings[1], "test.ini:19: [topic=orders] group.billing is accepted") {
		t.Errorf("warnings:\n%s", strings.Join(c.Warnings, "\n"))
	}
}

func TestTopicNames(t *testing.T) {
	t.Parallel()
	good := []string{"test", "meta-test", "a", "A.b_c%d-e", "%RETRY%group", "*", "log-*", "*-log", "a*b*c", strings.Repeat("x", 255)}
	for _, n := range good {
		mustParse(t, "[system]\nbrokerId=0\n[topic="+n+"]\n")
	}
	bad := []string{"a/b", ".", "..", "a b", "a:b", "ä", "!@#$%", strings.Repeat("x", 256)}
	for _, n := range bad {
		wantErr(t, "[system]\nbrokerId=0\n[topic="+n+"]\n", "invalid topic name")
	}
	wantErr(t, "[system]\nbrokerId=0\n[topic=]\n", "invalid topic name \"\"")

	for n, want := range map[string]bool{"test": true, "a*": false, "": false, ".": false, "..": false, "...": true, "a/b": false} {
		if ValidTopicName(n) != want {
			t.Errorf("ValidTopicName(%q) = %v", n, !want)
		}
	}
	c := mustParse(t, "[system]\nbrokerId=0\n[topic=*]\n")
	for _, n := range []string{"", "a/b", "..", strings.Repeat("x", 256), "a*"} {
		if _, ok := c.Topic(n); ok {
			t.Errorf("Topic(%q) accepted by [topic=*]", n)
		}
	}
}

func TestWildcardPrecedence(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `[system]
brokerId=0
[topic=*]
[topic=log-*]
[topic=log-app-*]
[topic=log-app-web]
[topic=*-audit]
[topic=log-*-audit]
[topic=l*]
[topic=x*y]
[topic=x*]
[topic=m*n]
[topic=m*]
[topic=*z]
[topic=*yz]
`)
	cases := map[string]string{
		"log-app-web":   "log-app-web", // exact name first
		"log-app-api":   "log-app-*",   // longest literal prefix
		"log-db":        "log-*",
		"log-":          "log-*", // '*' matches an empty run
		"log-db-audit":  "log-*-audit",
		"log-app-audit": "log-app-*", // prefix length beats literal count
		"lx":            "l*",
		"db-audit":      "*-audit", // prefix 0 for both * and *-audit: more literals
		"xay":           "x*y",     // same prefix as x*: more literals
		"xa":            "x*",
		"mn":            "m*n",
		"mnn":           "m*n",
		"mna":           "m*",
		"ayz":           "*yz",
		"az":            "*z",
		"other":         "*",
		"%DLQ%g":        "%DLQ%g", // system topics: never through a wildcard (conf/delay.go)
	}
	for name, want := range cases {
		got, ok := c.Topic(name)
		if !ok || got.Pattern != want || got.Name != name {
			t.Errorf("Topic(%q) = %q (name %q), %v; want pattern %q", name, got.Pattern, got.Name, ok, want)
		}
	}
	// File order breaks ties.
	c = mustParse(t, "[system]\nbrokerId=0\n[topic=a*b]\nnumPartitions=1\n[topic=a*c]\n[topic=ab*]\n[topic=a*x*]\nnumPartitions=2\n[topic=a*y*]\nnumPartitions=3\n")
	if got, _ := c.Topic("axy"); got.Pattern != "a*x*" {
		t.Errorf("tie: Topic(axy) = %q, want the first in the file", got.Pattern)
	}
	if got, _ := c.Topic("abc"); got.Pattern != "ab*" {
		t.Errorf("Topic(abc) = %q, want ab*", got.Pattern)
	}
}

func TestMatchPattern(t *testing.T) {
	t.Parallel()
	cases := []struct {
		p, n string
		want bool
	}{
		{"*", "a", true}, {"a*", "a", true}, {"a*", "ab", true}, {"a*", "ba", false},
		{"*a", "ba", true}, {"*a", "ab", false}, {"a*b", "ab", true}, {"a*b", "axxb", true},
		{"a*b", "axxbc", false}, {"a*b*c", "abc", true}, {"a*b*c", "aXbYbZc", true}, {"a*b*c", "acb", false},
		{"**", "x", true}, {"a**b", "ab", true}, {"abc", "abc", true}, {"abc", "abd", false},
		{"*aab", "aaab", true}, {"*ab*ab", "abxab", true}, {"*ab*ab", "abab", true}, {"*ab*ab", "aba", false},
	}
	for _, tc := range cases {
		if got := MatchPattern(tc.p, tc.n); got != tc.want {
			t.Errorf("MatchPattern(%q, %q) = %v", tc.p, tc.n, got)
		}
	}
}

func TestBlankValuesKeepDefaults(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `[system]
brokerId=5
hostName=
dataPath=
numPartitions=
deletePolicy=
deleteWhen=
[zookeeper]
zk.zkConnect=
[topic=t]
deletePolicy=
numPartitions=
`)
	if c.System.NumPartitions != 1 || c.System.DeletePolicy.Keep != 168*time.Hour || c.ZK.Connect != DefaultZKConnect ||
		c.System.HostName == "" || c.System.DataPath == "" || fmt.Sprint(c.System.DeleteWhen) != DefaultDeleteWhen {
		t.Errorf("blank values did not keep defaults: %+v %+v", c.System, c.ZK)
	}
	if tp, _ := c.Topic("t"); tp.NumPartitions != 1 || tp.DeletePolicy.Keep != 168*time.Hour {
		t.Errorf("topic = %+v", tp)
	}
}

func TestIniSyntax(t *testing.T) {
	t.Parallel()
	c := mustParse(t, "\xef\xbb\xbf; BOM, comments and spacing\r\n"+
		"# hash comment\r\n"+
		"[system]   ; trailing comment\r\n"+
		"  brokerId  =  9   ; inline comment after a space\r\n"+
		"hostName: colon.example\r\n"+
		"serverPort = \"8124\"\r\n"+
		"deleteWhen = 0 0 6,18 * * ?\r\n"+
		"appClassPath=a;b\r\n"+
		"[zookeeper]\r\n"+
		"zk.zkConnect=a:1,b:2/chroot # note\r\n"+
		"[topic=t]\r\n")
	if c.System.BrokerID != 9 || c.System.HostName != "colon.example" || c.System.ServerPort != 8124 ||
		c.ZK.Connect != "a:1,b:2/chroot" || c.System.AppClassPath != "a;b" {
		t.Errorf("system = %+v, zk = %+v", c.System, c.ZK)
	}
	// A key line's number survives CRLF and comments.
	wantErr(t, "; c\r\n[system]\r\nbrokerId=0\r\n\r\nbad key=1\r\n", "test.ini:5: unknown key \"bad key\"")
}

func TestRelativePaths(t *testing.T) {
	// Not parallel: changes the working directory.
	root := t.TempDir()
	confDir := filepath.Join(root, "conf")
	if err := os.Mkdir(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(confDir, "server.ini")
	text := "[system]\nbrokerId=0\ndataPath=../run/data\ndataLogPath=txlog\n[topic=t]\ndataPath=t-data\n"
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	t.Chdir(elsewhere)

	// Load resolves against the file's directory, whatever the working
	// directory, and also when given a relative path to the file.
	for _, path := range []string{file, mustRel(t, elsewhere, file)} {
		c, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if c.Path != file {
			t.Errorf("Path = %q, want %q", c.Path, file)
		}
		if want := filepath.Join(root, "run", "data"); c.System.DataPath != want {
			t.Errorf("dataPath = %q, want %q", c.System.DataPath, want)
		}
		if want := filepath.Join(confDir, "txlog"); c.System.DataLogPath != want {
			t.Errorf("dataLogPath = %q, want %q", c.System.DataLogPath, want)
		}
		if tp, _ := c.Topic("t"); tp.DataPath != filepath.Join(confDir, "t-data") {
			t.Errorf("topic dataPath = %q", tp.DataPath)
		}
	}
	// Parse with a bare name resolves against the working directory.
	c, err := Parse([]byte(text), "server.ini")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(filepath.Dir(elsewhere), "run", "data"); c.System.DataPath != want {
		t.Errorf("Parse(bare name): dataPath = %q, want %q", c.System.DataPath, want)
	}
	// dataLogPath follows dataPath unless set.
	c, err = Parse([]byte("[system]\nbrokerId=0\ndataPath=/srv/meta\n"), "x.ini")
	if err != nil {
		t.Fatal(err)
	}
	if c.System.DataLogPath != "/srv/meta" {
		t.Errorf("dataLogPath = %q", c.System.DataLogPath)
	}
	// "~" and ${user.home} expand to the home directory.
	home := t.TempDir()
	t.Setenv("HOME", home)
	c, err = Parse([]byte("[system]\nbrokerId=0\ndataPath=${user.home}/meta\ndataLogPath=~/txlog\n"), "x.ini")
	if err != nil {
		t.Fatal(err)
	}
	if c.System.DataPath != filepath.Join(home, "meta") || c.System.DataLogPath != filepath.Join(home, "txlog") {
		t.Errorf("paths = %q, %q", c.System.DataPath, c.System.DataLogPath)
	}
	// Missing file.
	if _, err := Load(filepath.Join(root, "nope.ini")); err == nil || !strings.Contains(err.Error(), "nope.ini") {
		t.Errorf("Load(missing) = %v", err)
	}
}

func mustRel(t *testing.T, base, target string) string {
	t.Helper()
	r, err := filepath.Rel(base, target)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestValidateProgrammatic(t *testing.T) {
	t.Parallel()
	c := Default(1)
	c.System.MaxSegmentSize = 64 << 10
	c.System.MaxMessageSize = 32 << 10
	c.System.IndexFileSize = 16 * 100
	c.Topics = append(c.Topics, c.NewTopic("test"), c.NewTopic("log-*"))
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if tp, ok := c.Topic("log-x"); !ok || tp.NumPartitions != 1 || !tp.AcceptPublish {
		t.Errorf("Topic(log-x) = %+v, %v", tp, ok)
	}
	c.Topics = append(c.Topics, c.NewTopic("test"))
	c.System.BrokerID = 1 << 15
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "[topic=test]: duplicate section") ||
		!strings.Contains(err.Error(), "[system] brokerId: 32768 is out of range") {
		t.Errorf("Validate = %v", err)
	}
}

func TestSlaveIDInOnePlace(t *testing.T) {
	t.Parallel()
	wantErr(t, "[system]\nbrokerId=0\nslaveId=1\n[slave]\nslaveId=2\n", "slaveId is already set in [system]")
	c := mustParse(t, "[system]\nbrokerId=0\nslaveId=1\n")
	if c.Slave.ID != 1 {
		t.Errorf("slaveId = %d", c.Slave.ID)
	}
}

func TestQuotedKeysAndMultilineValues(t *testing.T) {
	t.Parallel()
	c := mustParse(t, "[system]\n\"brokerId\" = 4\n`hostName` = h.example\nappClassPath = \"\"\"/a\n/b\n\"\"\"\nserverPort=9001\n[topic=t]\n")
	if c.System.BrokerID != 4 || c.System.HostName != "h.example" || c.System.ServerPort != 9001 ||
		c.System.AppClassPath != "/a\n/b" {
		t.Errorf("system = %+v", c.System)
	}
	// Lines inside the multi-line value are not keys; line numbers after it are right.
	wantErr(t, "[system]\nbrokerId=1\nappClassPath=`x\nnot a key\n`\nbogus=1\n", "test.ini:6: unknown key \"bogus\"")
	wantErr(t, "[system]\n\"brokerId=1\n", "not a key=value pair")
	wantErr(t, "[system]\n\"brokerId\" 1\n", "not a key=value pair")
}

func TestErrorCap(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("[system]\nbrokerId=0\n")
	for i := 0; i < maxErrors+10; i++ {
		fmt.Fprintf(&b, "bogus%d=1\n", i)
	}
	err := wantErr(t, b.String(), "… and 10 more problems")
	if n := strings.Count(err.Error(), "unknown key"); n != maxErrors {
		t.Errorf("%d errors shown, want %d", n, maxErrors)
	}
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{File: "f", Line: 2, Msg: "m"}, "f:2: m"},
		{Error{File: "f", Msg: "m"}, "f: m"},
		{Error{Line: 3, Msg: "m"}, "line 3: m"},
		{Error{Msg: "m"}, "m"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}
