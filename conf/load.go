package conf

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"gopkg.in/ini.v1"
)

// Load reads and validates the server.ini at path. Relative paths inside
// the file are resolved against the file's directory. The error, if any,
// lists every problem found (see Error).
func Load(path string) (*Config, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(abs)
	if err != nil {
		return nil, fmt.Errorf("conf: %w", err)
	}
	return Parse(data, abs)
}

// Parse parses and validates server.ini content. name is used in error
// messages and becomes Config.Path; relative paths inside the content are
// resolved against filepath.Dir(name) (the working directory when name has
// no directory part).
func Parse(data []byte, name string) (*Config, error) {
	p := &parser{name: name}
	cfg, errs := p.parse(data)
	if len(errs) > 0 {
		if len(errs) > maxErrors {
			n := len(errs) - maxErrors
			errs = append(errs[:maxErrors], fmt.Errorf("%s: … and %d more problems", name, n))
		}
		return nil, errors.Join(errs...)
	}
	return cfg, nil
}

const maxErrors = 30

// keyStatus says what metaq does with a key.
type keyStatus int

const (
	used       keyStatus = iota // implemented
	notYetUsed                  // accepted, documented, used by a later feature
	ignored                     // accepted for MetaQ compatibility, never used (warning)
)

type keyDef struct {
	name   string
	status keyStatus
	note   string // why an ignored key is ignored
	set    func(p *parser, c *Config, v string) error
}

type topicKeyDef struct {
	name   string
	status keyStatus
	note   string
	set    func(p *parser, t *Topic, v string) error
}

const (
	noteThreads = "metaq serves each connection with its own goroutines; there is no thread pool to size"
	noteDiamond = "Taobao's Diamond configuration service is not supported; set zk.zkConnect"
)

var systemKeys = []keyDef{
	{"brokerId", used, "", func(p *parser, c *Config, v string) error { return setInt(&c.System.BrokerID, v) }},
	{"hostName", used, "", func(p *parser, c *Config, v string) error { c.System.HostName = v; return nil }},
	{"bindHost", used, "", func(p *parser, c *Config, v string) error { c.System.BindHost = v; return nil }},
	{"serverPort", used, "", func(p *parser, c *Config, v string) error { return setInt(&c.System.ServerPort, v) }},
	{"dashboardHttpPort", used, "", func(p *parser, c *Config, v string) error { return setInt(&c.System.DashboardHTTPPort, v) }},
	{"numPartitions", used, "", func(p *parser, c *Config, v string) error { return setInt(&c.System.NumPartitions, v) }},
	{"dataPath", used, "", func(p *parser, c *Config, v string) error { return p.setPath(&c.System.DataPath, v) }},
	{"dataLogPath", notYetUsed, "", func(p *parser, c *Config, v string) error {
		p.dataLogPathSet = true
		return p.setPath(&c.System.DataLogPath, v)
	}},
	{"unflushThreshold", used, "", func(p *parser, c *Config, v string) error { return setInt(&c.System.UnflushThreshold, v) }},
	{"unflushInterval", used, "", func(p *parser, c *Config, v string) error {
		return setDuration(&c.System.UnflushInterval, v, time.Millisecond)
	}},
	{"maxSegmentSize", used, "", func(p *parser, c *Config, v string) error { return setSize64(&c.System.MaxSegmentSize, v) }},
	{"maxTransferSize", used, "", func(p *parser, c *Config, v string) error { return setSize(&c.System.MaxTransferSize, v) }},
	{"maxMessageSize", used, "", func(p *parser, c *Config, v string) error { return setSize(&c.System.MaxMessageSize, v) }},
	{"indexFileSize", used, "", func(p *parser, c *Config, v string) error { return setSize64(&c.System.IndexFileSize, v) }},
	{"deletePolicy", used, "", func(p *parser, c *Config, v string) error { return set(&c.System.DeletePolicy, v, ParseDeletePolicy) }},
	{"deleteWhen", used, "", func(p *parser, c *Config, v string) error { return set(&c.System.DeleteWhen, v, ParseSchedule) }},
	{"acceptPublish", used, "", func(p *parser, c *Config, v string) error { return set(&c.System.AcceptPublish, v, parseBool) }},
	{"acceptSubscribe", used, "", func(p *parser, c *Config, v string) error { return set(&c.System.AcceptSubscribe, v, parseBool) }},
	{"stat", notYetUsed, "", func(p *parser, c *Config, v string) error { return set(&c.System.Stat, v, parseBool) }},
	{"updateConsumerOffsets", notYetUsed, "", func(p *parser, c *Config, v string) error {
		return set(&c.System.UpdateConsumerOffsets, v, parseBool)
	}},
	{"idleTimeout", used, "", func(p *parser, c *Config, v string) error { return setDuration(&c.System.IdleTimeout, v, time.Second) }},
	{"maxConnections", used, "", func(p *parser, c *Config, v string) error { return setInt(&c.System.MaxConnections, v) }},
	{"messageDelayLevel", used, "", func(p *parser, c *Config, v string) error { return set(&c.System.Delay.Levels, v, ParseDelayLevels) }},
	{"maxReconsumeTimes", used, "", func(p *parser, c *Config, v string) error { return setIntMin(&c.System.Delay.MaxReconsumeTimes, v, 1) }},
	{"maxDeliveries", used, "", func(p *parser, c *Config, v string) error { return setIntMin(&c.System.Pop.MaxDeliveries, v, 1) }},
	{"popMaxInflight", used, "", func(p *parser, c *Config, v string) error { return setIntMin(&c.System.Pop.MaxInflight, v, 1) }},
	{"popMaxGroups", used, "", func(p *parser, c *Config, v string) error { return setIntMin(&c.System.Pop.MaxGroups, v, 1) }},
	{"popSpillAfterMs", used, "", func(p *parser, c *Config, v string) error { return setIntMin(&c.System.Pop.SpillAfterMs, v, 1) }},
	{"popMemoryMb", used, "", func(p *parser, c *Config, v string) error {
		var n int
		if err := setInt(&n, v); err != nil {
			return err
		}
		if n == 0 || n < -1 {
			return fmt.Errorf("want -1 (no side file) or at least 1")
		}
		c.System.Pop.MemoryMb = n
		return nil
	}},
	{"dashboardToken", used, "", func(p *parser, c *Config, v string) error { c.System.DashboardToken = v; return nil }},
	{"dashboardMaxConnections", used, "", func(p *parser, c *Config, v string) error {
		return setIntMin(&c.System.DashboardMaxConnections, v, 1)
	}},
	{"metricsMaxTopics", used, "", func(p *parser, c *Config, v string) error { return setInt(&c.System.MetricsMaxTopics, v) }},
	{"metricsMaxLagSeries", used, "", func(p *parser, c *Config, v string) error { return setInt(&c.System.MetricsMaxLagSeries, v) }},
	{"metricsLagIntervalMs", used, "", func(p *parser, c *Config, v string) error {
		return setDuration(&c.System.MetricsLagInterval, v, time.Millisecond)
	}},
	{"maxPendingPutBytes", used, "", func(p *parser, c *Config, v string) error { return setSize64(&c.System.MaxPendingPutBytes, v) }},
	{"putDataTimeoutMs", used, "", func(p *parser, c *Config, v string) error {
		return setDuration(&c.System.PutDataTimeout, v, time.Millisecond)
	}},
	{"maxParkedGetsPerConnection", used, "", func(p *parser, c *Config, v string) error { return setInt(&c.System.MaxParkedGets, v) }},
	{"slaveId", used, "", func(p *parser, c *Config, v string) error { return p.setSlaveID(c, v, "system") }},
	{"getProcessThreadCount", ignored, noteThreads, func(p *parser, c *Config, v string) error {
		return setInt(&c.System.GetProcessThreadCount, v)
	}},
	{"putProcessThreadCount", ignored, noteThreads, func(p *parser, c *Config, v string) error {
		return setInt(&c.System.PutProcessThreadCount, v)
	}},
	{"loadMessageStoresInParallel", ignored, "metaq recovers one shared commit log; there are no per-topic stores to load in parallel",
		func(p *parser, c *Config, v string) error {
			return set(&c.System.LoadMessageStoresInParallel, v, parseBool)
		}},
	{"quartzThreadCount", ignored, "deleteWhen schedules run on a timer goroutine, not a Quartz thread pool",
		func(p *parser, c *Config, v string) error { return setInt(&c.System.QuartzThreadCount, v) }},
	{"appClassPath", ignored, "Java consumer filter classes are not supported (the broker filters by tag)",
		func(p *parser, c *Config, v string) error { c.System.AppClassPath = v; return nil }},
	{"maxCheckpoints", notYetUsed, "", func(p *parser, c *Config, v string) error { return setInt(&c.System.MaxCheckpoints, v) }},
	{"checkpointInterval", notYetUsed, "", func(p *parser, c *Config, v string) error {
		return setDuration(&c.System.CheckpointInterval, v, time.Millisecond)
	}},
	{"maxTxTimeoutTimerCapacity", used, "", func(p *parser, c *Config, v string) error {
		return setInt(&c.System.MaxTxTimeoutTimerCapacity, v)
	}},
	{"maxTxPerConnection", used, "", func(p *parser, c *Config, v string) error { return setInt(&c.System.MaxTxPerConnection, v) }},
	{"maxTxTimeoutInSeconds", used, "", func(p *parser, c *Config, v string) error {
		return setDuration(&c.System.MaxTxTimeout, v, time.Second)
	}},
	{"transactionCheckInterval", used, "", func(p *parser, c *Config, v string) error {
		return setDuration(&c.System.TransactionCheckInterval, v, time.Millisecond)
	}},
	{"transactionCheckMax", used, "", func(p *parser, c *Config, v string) error { return setInt(&c.System.TransactionCheckMax, v) }},
	{"flushTxLogAtCommit", used, "", func(p *parser, c *Config, v string) error { return setInt(&c.System.FlushTxLogAtCommit, v) }},
}

var zkKeys = []keyDef{
	{"zk.zkEnable", used, "", func(p *parser, c *Config, v string) error { return set(&c.ZK.Enable, v, parseBool) }},
	{"zk.zkConnect", used, "", func(p *parser, c *Config, v string) error { c.ZK.Connect = v; return nil }},
	{"zk.zkRoot", used, "", func(p *parser, c *Config, v string) error { c.ZK.Root = v; return nil }},
	{"zk.zkSessionTimeoutMs", used, "", func(p *parser, c *Config, v string) error {
		return setDuration(&c.ZK.SessionTimeout, v, time.Millisecond)
	}},
	{"zk.zkConnectionTimeoutMs", used, "", func(p *parser, c *Config, v string) error {
		return setDuration(&c.ZK.ConnectionTimeout, v, time.Millisecond)
	}},
	{"zk.zkSyncTimeMs", used, "", func(p *parser, c *Config, v string) error { return setDuration(&c.ZK.SyncTime, v, time.Millisecond) }},
	{"zk.zkAuth", used, "", func(p *parser, c *Config, v string) error { c.ZK.Auth = v; return nil }},
	{"diamondZKDataId", ignored, noteDiamond, func(p *parser, c *Config, v string) error { return nil }},
	{"diamondZKGroup", ignored, noteDiamond, func(p *parser, c *Config, v string) error { return nil }},
}

var slaveKeys = []keyDef{
	{"slaveId", used, "", func(p *parser, c *Config, v string) error { return p.setSlaveID(c, v, "slave") }},
	{"slaveGroup", used, "", func(p *parser, c *Config, v string) error { c.Slave.Group = v; return nil }},
	{"slaveMaxDelayInMills", used, "", func(p *parser, c *Config, v string) error {
		return setDuration(&c.Slave.MaxDelay, v, time.Millisecond)
	}},
	{"autoSyncMasterConfig", notYetUsed, "", func(p *parser, c *Config, v string) error { return set(&c.Slave.AutoSyncMasterConfig, v, parseBool) }},
}

var replicationKeys = []keyDef{
	{"syncReplicas", used, "", func(p *parser, c *Config, v string) error { return setInt(&c.Replication.SyncReplicas, v) }},
	{"replicaTimeoutMs", used, "", func(p *parser, c *Config, v string) error {
		return setDuration(&c.Replication.ReplicaTimeout, v, time.Millisecond)
	}},
	{"autoFailover", used, "", func(p *parser, c *Config, v string) error { return set(&c.Replication.AutoFailover, v, parseBool) }},
	{"masterAddr", used, "", func(p *parser, c *Config, v string) error { c.Replication.MasterAddr = v; return nil }},
}

var topicKeys = []topicKeyDef{
	{"numPartitions", used, "", func(p *parser, t *Topic, v string) error { return setInt(&t.NumPartitions, v) }},
	{"acceptPublish", used, "", func(p *parser, t *Topic, v string) error { return set(&t.AcceptPublish, v, parseBool) }},
	{"acceptSubscribe", used, "", func(p *parser, t *Topic, v string) error { return set(&t.AcceptSubscribe, v, parseBool) }},
	{"deletePolicy", used, "", func(p *parser, t *Topic, v string) error { return set(&t.DeletePolicy, v, ParseDeletePolicy) }},
	{"deleteWhen", notYetUsed, "", func(p *parser, t *Topic, v string) error { return set(&t.DeleteWhen, v, ParseSchedule) }},
	{"unflushThreshold", notYetUsed, "", func(p *parser, t *Topic, v string) error { return setInt(&t.UnflushThreshold, v) }},
	{"unflushInterval", notYetUsed, "", func(p *parser, t *Topic, v string) error {
		return setDuration(&t.UnflushInterval, v, time.Millisecond)
	}},
	{"stat", notYetUsed, "", func(p *parser, t *Topic, v string) error { return set(&t.Stat, v, parseBool) }},
	{"dataPath", ignored, "every topic is stored in the one commit log under [system] dataPath",
		func(p *parser, t *Topic, v string) error { return p.setPath(&t.DataPath, v) }},
}

// groupKeyPrefix starts MetaQ's per-group filter keys: group.<group>=<class>.
const groupKeyPrefix = "group."

const noteFilter = "Java consumer filter classes are not supported (consumers filter by tag)"

func setInt(dst *int, v string) error {
	n, err := parseInt(v)
	if err != nil {
		return err
	}
	if n < -1<<31 || n > 1<<31-1 {
		return fmt.Errorf("%d is out of range", n)
	}
	*dst = int(n)
	return nil
}

// setIntMin sets a key whose zero value in Config means "unset, use the
// default" (the delay and delivery keys): a value below lo written in the
// file would silently run as the default, so it is refused.
func setIntMin(dst *int, v string, lo int) error {
	var n int
	if err := setInt(&n, v); err != nil {
		return err
	}
	if n < lo {
		return fmt.Errorf("want at least %d", lo)
	}
	*dst = n
	return nil
}

func setSize(dst *int, v string) error {
	n, err := ParseSize(v)
	if err != nil {
		return err
	}
	if n > 1<<31-1 {
		return fmt.Errorf("%d is too large", n)
	}
	*dst = int(n)
	return nil
}

func setSize64(dst *int64, v string) error {
	n, err := ParseSize(v)
	if err != nil {
		return err
	}
	*dst = n
	return nil
}

// set parses v with parse and stores the result in dst.
func set[T any](dst *T, v string, parse func(string) (T, error)) error {
	x, err := parse(v)
	if err != nil {
		return err
	}
	*dst = x
	return nil
}

func setDuration(dst *time.Duration, v string, unit time.Duration) error {
	d, err := parseDuration(v, unit)
	if err != nil {
		return err
	}
	*dst = d
	return nil
}

// parser holds the state of one Parse call.
type parser struct {
	name           string
	dir            string
	layout         *layout
	errs           []error
	warnings       []string
	dataLogPathSet bool
	slaveIDFrom    string // section that set slaveId
}

func (p *parser) setPath(dst *string, v string) error {
	r, err := resolvePath(v, p.dir)
	if err != nil {
		return err
	}
	*dst = r
	return nil
}

func (p *parser) setSlaveID(c *Config, v, section string) error {
	if p.slaveIDFrom != "" && p.slaveIDFrom != section {
		return fmt.Errorf("slaveId is already set in [%s]; set it in one place ([slave], as MetaQ)", p.slaveIDFrom)
	}
	p.slaveIDFrom = section
	return setInt(&c.Slave.ID, v)
}

// errorf records a problem at key (or the section header when key is "")
// of the section whose raw name is raw.
func (p *parser) errorf(raw, key, format string, args ...any) {
	p.errs = append(p.errs, p.problem(raw, key, format, args...))
}

// warnf records a warning at key of section raw.
func (p *parser) warnf(raw, key, format string, args ...any) {
	p.warnings = append(p.warnings, p.problem(raw, key, format, args...).Error())
}

func (p *parser) problem(raw, key, format string, args ...any) *Error {
	sec := canonicalSection(raw)
	if raw == ini.DefaultSection {
		sec = ""
	}
	return &Error{File: p.name, Line: p.layout.line(raw, key), Section: sec, Key: key,
		Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) parse(data []byte) (*Config, []error) {
	if p.name != "" {
		p.dir = filepath.Dir(p.name)
	}
	p.layout = scanLayout(data)
	for _, e := range p.layout.errs {
		e.File = p.name
		p.errs = append(p.errs, e)
	}
	if len(p.errs) > 0 {
		return nil, p.errs
	}
	f, err := ini.LoadSources(ini.LoadOptions{
		SpaceBeforeInlineComment: true,   // "a;b" is a value, "a ; note" has a comment
		IgnoreContinuation:       true,   // a trailing backslash is part of the value
		ChildSectionDelimiter:    "\x00", // no parent sections: [topic=a.b] does not inherit [topic=a]
		KeyValueDelimiters:       "=:",   // as ini4j
	}, data)
	if err != nil {
		return nil, []error{&Error{File: p.name, Msg: err.Error()}}
	}

	c := defaults(0)
	c.Path = p.name

	// Classify sections; apply [system], [zookeeper], [slave] before the
	// topics, which inherit [system].
	var sys, zk, slave, repl, security *ini.Section
	var topics []*ini.Section
	for _, sec := range f.Sections() {
		name := sec.Name()
		switch {
		case name == ini.DefaultSection:
			for _, k := range sec.Keys() {
				p.errorf(name, k.Name(), "key %q is outside any section; put it under [system]", k.Name())
			}
		case strings.TrimSpace(name) == "system":
			sys = sec
		case strings.TrimSpace(name) == "zookeeper":
			zk = sec
		case strings.TrimSpace(name) == "slave":
			slave = sec
		case strings.TrimSpace(name) == "replication":
			repl = sec
		case strings.TrimSpace(name) == secSection:
			security = sec
		default:
			if _, ok := topicSectionName(name); ok {
				topics = append(topics, sec)
				continue
			}
			p.unknownSection(name)
		}
	}

	if sys == nil {
		p.errs = append(p.errs, &Error{File: p.name, Section: "system", Key: "brokerId",
			Msg: "missing [system] section with brokerId (the broker's unique id, 0..32767)"})
	} else {
		if k, err := sys.GetKey("brokerId"); err != nil || strings.TrimSpace(k.String()) == "" {
			p.errorf(sys.Name(), "brokerId", "[system] brokerId is required (the broker's unique id, 0..%d)", MaxBrokerID)
		}
		p.applyKeys(c, sys, "system", systemKeys)
	}
	if zk != nil {
		p.applyKeys(c, zk, "zookeeper", zkKeys)
	}
	if slave != nil {
		p.applyKeys(c, slave, "slave", slaveKeys)
	}
	if repl != nil {
		p.applyKeys(c, repl, "replication", replicationKeys)
	}
	if security != nil {
		p.applyKeys(c, security, secSection, securityKeys)
	}

	if c.System.HostName == "" {
		c.System.HostName = DefaultHostName()
	}
	if c.System.DataPath == "" {
		if err := p.setPath(&c.System.DataPath, "~/meta"); err != nil {
			p.errorf("system", "dataPath", "[system] dataPath is not set and the default ~/meta cannot be used: %v", err)
		}
	}
	if !p.dataLogPathSet || c.System.DataLogPath == "" {
		c.System.DataLogPath = c.System.DataPath
	}

	for _, sec := range topics {
		pattern, _ := topicSectionName(sec.Name())
		t := c.NewTopic(pattern)
		t.Line = p.layout.sectionLine(sec.Name())
		p.applyTopicKeys(&t, sec)
		c.Topics = append(c.Topics, t)
	}

	// Range and cross-key checks, except for keys already reported (a key
	// whose value did not parse kept its default).
	reported := map[[2]string]bool{}
	for _, e := range p.errs {
		if ce, ok := e.(*Error); ok && ce.Key != "" {
			reported[[2]string{ce.Section, ce.Key}] = true
		}
	}
	for _, e := range c.validate(p.layoutLocator()) {
		if ce, ok := e.(*Error); ok && reported[[2]string{ce.Section, ce.Key}] {
			continue
		}
		p.errs = append(p.errs, e)
	}
	if len(p.errs) > 0 {
		sortErrors(p.errs)
		return nil, p.errs
	}
	if len(c.Topics) == 0 {
		p.warnings = append(p.warnings, (&Error{File: p.name,
			Msg: "no [topic=…] section: the broker accepts no topic (MetaQ refuses to start with an empty topic list); add e.g. [topic=test] or [topic=*]"}).Error())
	}
	c.Warnings = p.warnings
	return c, nil
}

// layoutLocator maps validate's section names to lines.
func (p *parser) layoutLocator() locator {
	return func(section, key string) int {
		if raw, ok := p.layout.canonical[section]; ok {
			section = raw
		}
		return p.layout.line(section, key)
	}
}

func sortErrors(errs []error) {
	sort.SliceStable(errs, func(i, j int) bool {
		a, aok := errs[i].(*Error)
		b, bok := errs[j].(*Error)
		if !aok || !bok {
			return aok && !bok
		}
		return a.Line < b.Line
	})
}

// topicSectionName returns the topic pattern of a "topic=<pattern>" section
// (spaces around '=' are tolerated).
func topicSectionName(name string) (string, bool) {
	n := strings.TrimSpace(name)
	if !strings.HasPrefix(n, "topic") {
		return "", false
	}
	rest := strings.TrimSpace(n[len("topic"):])
	if !strings.HasPrefix(rest, "=") {
		return "", false
	}
	return strings.TrimSpace(rest[1:]), true
}

func (p *parser) applyKeys(c *Config, sec *ini.Section, canon string, defs []keyDef) {
	for _, k := range sec.Keys() {
		name := k.Name()
		def := findKey(defs, name)
		if def == nil {
			p.unknownKey(sec.Name(), canon, name, keyNames(defs))
			continue
		}
		v := strings.TrimSpace(k.String())
		if v == "" {
			continue // MetaQ: a blank value keeps the default
		}
		if err := def.set(p, c, v); err != nil {
			p.errorf(sec.Name(), name, "[%s] %s: invalid value %q: %v", canon, name, v, err)
			continue
		}
		if def.status == ignored {
			p.warnf(sec.Name(), name, "[%s] %s is accepted for MetaQ compatibility but ignored: %s", canon, name, def.note)
		}
	}
}

func (p *parser) applyTopicKeys(t *Topic, sec *ini.Section) {
	canon := "topic=" + t.Pattern
	for _, k := range sec.Keys() {
		name := k.Name()
		v := strings.TrimSpace(k.String())
		if strings.HasPrefix(name, groupKeyPrefix) && len(name) > len(groupKeyPrefix) {
			if v == "" {
				continue
			}
			if t.Filters == nil {
				t.Filters = make(map[string]string)
			}
			t.Filters[name[len(groupKeyPrefix):]] = v
			p.warnf(sec.Name(), name, "[%s] %s is accepted for MetaQ compatibility but ignored: %s", canon, name, noteFilter)
			continue
		}
		var def *topicKeyDef
		for i := range topicKeys {
			if topicKeys[i].name == name {
				def = &topicKeys[i]
				break
			}
		}
		if def == nil {
			names := make([]string, 0, len(topicKeys)+1)
			for _, d := range topicKeys {
				names = append(names, d.name)
			}
			p.unknownKey(sec.Name(), canon, name, names)
			continue
		}
		if v == "" {
			continue
		}
		if err := def.set(p, t, v); err != nil {
			p.errorf(sec.Name(), name, "[%s] %s: invalid value %q: %v", canon, name, v, err)
			continue
		}
		if def.status == ignored {
			p.warnf(sec.Name(), name, "[%s] %s is accepted for MetaQ compatibility but ignored: %s", canon, name, def.note)
		}
	}
}

func findKey(defs []keyDef, name string) *keyDef {
	for i := range defs {
		if defs[i].name == name {
			return &defs[i]
		}
	}
	return nil
}

func keyNames(defs []keyDef) []string {
	names := make([]string, len(defs))
	for i, d := range defs {
		names[i] = d.name
	}
	return names
}

// homeOf names the section a key of another section belongs to.
func homeOf(key string) string {
	var homes []string
	if findKey(systemKeys, key) != nil {
		homes = append(homes, "[system]")
	}
	if findKey(zkKeys, key) != nil {
		homes = append(homes, "[zookeeper]")
	}
	if findKey(slaveKeys, key) != nil {
		homes = append(homes, "[slave]")
	}
	if findKey(replicationKeys, key) != nil {
		homes = append(homes, "[replication]")
	}
	if findKey(securityKeys, key) != nil {
		homes = append(homes, "[security]")
	}
	for _, d := range topicKeys {
		if d.name == key {
			homes = append(homes, "[topic=…]")
			break
		}
	}
	return strings.Join(homes, " or ")
}

func (p *parser) unknownKey(raw, canon, key string, known []string) {
	if home := homeOf(key); home != "" {
		p.errorf(raw, key, "key %q is not allowed in [%s]; it belongs in %s", key, canon, home)
		return
	}
	if best := closest(key, known); best != "" {
		p.errorf(raw, key, "unknown key %q in [%s]; did you mean %q?", key, canon, best)
		return
	}
	p.errorf(raw, key, "unknown key %q in [%s] (known keys: %s)", key, canon, strings.Join(known, ", "))
}

func (p *parser) unknownSection(raw string) {
	name := strings.TrimSpace(raw)
	cands := []string{"system", "zookeeper", "slave", "replication", secSection}
	lower := strings.ToLower(name)
	// "[topics=x]", "[Topic=x]", "[topic x]", "[topic:x]" → "[topic=x]"
	if i := strings.IndexAny(lower, "=: "); i > 0 && levenshtein(strings.TrimSpace(lower[:i]), "topic") <= 2 {
		if rest := strings.TrimLeft(strings.TrimSpace(name[i:]), "=: "); rest != "" {
			p.errorf(raw, "", "unknown section [%s]; did you mean [topic=%s]?", name, rest)
			return
		}
	}
	if best := closest(name, cands); best != "" {
		p.errorf(raw, "", "unknown section [%s]; did you mean [%s]?", name, best)
		return
	}
	if ValidTopicPattern(name) {
		p.errorf(raw, "", "unknown section [%s]; did you mean [topic=%s]?", name, name)
		return
	}
	p.errorf(raw, "", "unknown section [%s] (known: [system], [zookeeper], [slave], [replication], [%s], [topic=<name>])", name, secSection)
}

// closest returns the known name nearest to s by Levenshtein distance
// (ignoring case), or "" when none is reasonably close.
func closest(s string, known []string) string {
	best, bestD := "", 1<<30
	ls := strings.ToLower(s)
	for _, k := range known {
		d := levenshtein(ls, strings.ToLower(k))
		if d < bestD {
			best, bestD = k, d
		}
	}
	limit := len(s) / 3
	if limit < 2 {
		limit = 2
	}
	if bestD > limit {
		return ""
	}
	return best
}

func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// layout is what a light line scan learns about the file: where sections
// and keys are (for error messages), duplicates and malformed lines. Values
// come from gopkg.in/ini.v1; the scan follows its rules for section headers
// (name up to the last ']'), comments (lines starting with ';' or '#'),
// key/value delimiters ('=' or ':') and quoted multi-line values.
type layout struct {
	sections  map[string]int            // raw section name → header line
	keys      map[string]map[string]int // raw section name → key → line
	canonical map[string]string         // canonical section name ("system", "topic=x") → raw name
	errs      []*Error
}

func (l *layout) line(section, key string) int {
	if l == nil {
		return 0
	}
	if key != "" {
		if n := l.keys[section][key]; n > 0 {
			return n
		}
	}
	return l.sections[section]
}

func (l *layout) sectionLine(section string) int { return l.sections[section] }

func scanLayout(data []byte) *layout {
	l := &layout{
		sections:  map[string]int{},
		keys:      map[string]map[string]int{},
		canonical: map[string]string{},
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	lines := strings.Split(string(data), "\n")
	section := ini.DefaultSection
	for i := 0; i < len(lines); i++ {
		n := i + 1
		line := strings.TrimSpace(strings.TrimSuffix(lines[i], "\r"))
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' {
			end := strings.LastIndexByte(line, ']')
			if end < 0 {
				l.errs = append(l.errs, &Error{Line: n, Msg: fmt.Sprintf("unclosed section header %q", line)})
				continue
			}
			section = line[1:end]
			if strings.TrimSpace(section) == "" {
				l.errs = append(l.errs, &Error{Line: n, Msg: "empty section name []"})
				continue
			}
			canon := canonicalSection(section)
			if first, dup := l.sections[section]; dup {
				l.errs = append(l.errs, &Error{Line: n, Section: canon,
					Msg: fmt.Sprintf("duplicate section [%s] (first at line %d)", canon, first)})
				continue
			}
			if raw, dup := l.canonical[canon]; dup {
				l.errs = append(l.errs, &Error{Line: n, Section: canon,
					Msg: fmt.Sprintf("duplicate section [%s] (first at line %d)", canon, l.sections[raw])})
				continue
			}
			l.sections[section] = n
			l.canonical[canon] = section
			l.keys[section] = map[string]int{}
			continue
		}
		key, rest, ok := splitKey(line)
		if !ok {
			l.errs = append(l.errs, &Error{Line: n, Section: canonicalSection(section),
				Msg: fmt.Sprintf("line %q is not a key=value pair, a [section] or a ; comment", line)})
			continue
		}
		if key == "" {
			l.errs = append(l.errs, &Error{Line: n, Section: canonicalSection(section),
				Msg: fmt.Sprintf("empty key name in %q", line)})
			continue
		}
		if l.keys[section] == nil {
			l.keys[section] = map[string]int{}
		}
		if first, dup := l.keys[section][key]; dup {
			l.errs = append(l.errs, &Error{Line: n, Section: canonicalSection(section), Key: key,
				Msg: fmt.Sprintf("duplicate key %q in [%s] (first at line %d)", key, canonicalSection(section), first)})
			continue
		}
		l.keys[section][key] = n
		// A value opened with """ or ` and not closed on this line
		// continues until the closing quote (ini.v1 multi-line values).
		v := strings.TrimSpace(rest)
		for _, q := range []string{`"""`, "`"} {
			if len(v) > len(q) && strings.HasPrefix(v, q) && !strings.Contains(v[len(q):], q) {
				for i+1 < len(lines) {
					i++
					if strings.Contains(lines[i], q) {
						break
					}
				}
				break
			}
		}
	}
	return l
}

// splitKey splits "key = value" at the first '=' or ':' (after a quoted
// key, if the key is quoted).
func splitKey(line string) (key, rest string, ok bool) {
	start := 0
	if line[0] == '"' || line[0] == '`' {
		q := line[:1]
		if strings.HasPrefix(line, `"""`) {
			q = `"""`
		}
		end := strings.Index(line[len(q):], q)
		if end < 0 {
			return "", "", false
		}
		start = len(q) + end + len(q)
		i := strings.IndexAny(line[start:], "=:")
		if i < 0 {
			return "", "", false
		}
		return strings.TrimSpace(line[len(q) : len(q)+end]), line[start+i+1:], true
	}
	i := strings.IndexAny(line, "=:")
	if i < 0 {
		return "", "", false
	}
	return strings.TrimSpace(line[:i]), line[i+1:], true
}

// canonicalSection trims a section name and normalizes "topic = x" to
// "topic=x".
func canonicalSection(raw string) string {
	if t, ok := topicSectionName(raw); ok {
		return "topic=" + t
	}
	return strings.TrimSpace(raw)
}
