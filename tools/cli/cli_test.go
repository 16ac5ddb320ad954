package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/brokertest"
	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/zkmeta/zktest"
)

func TestProduceConsumeRoundTrip(t *testing.T) {
	c := newCluster(t, 2, map[string]int{"orders": 2}, false)

	out := c.mustRun("produce", "--topic", "orders", "-m", "one", "-m", "two", "-m", "three", "--tag", "paid", "--key", "o-1", "--key", "o-2", "--json")
	sent := jsonLines[sentRow](t, out)
	if len(sent) != 3 {
		t.Fatalf("want 3 sent rows, got %d:\n%s", len(sent), out)
	}
	for _, s := range sent {
		if s.Topic != "orders" || s.MsgID < 0 || s.Offset < 0 {
			t.Fatalf("bad sent row %+v", s)
		}
		if id, _ := protocol.SplitMsgID(s.MsgID); id != s.BrokerID {
			t.Fatalf("msgId %d does not name broker %d", s.MsgID, s.BrokerID)
		}
	}

	out = c.mustRun("consume", "--topic", "orders", "--from", "earliest", "--count", "3", "--format", "json", "--timeout", "20s")
	got := jsonLines[messageJSON](t, out)
	if len(got) != 3 {
		t.Fatalf("want 3 messages, got %d:\n%s", len(got), out)
	}
	bodies := map[string]messageJSON{}
	for _, m := range got {
		if m.Body == nil {
			t.Fatalf("no body in %+v", m)
		}
		bodies[*m.Body] = m
	}
	for i, want := range []string{"one", "two", "three"} {
		m, ok := bodies[want]
		if !ok {
			t.Fatalf("message %q not consumed; got %s", want, out)
		}
		if m.Tag != "paid" || strings.Join(m.Keys, ",") != "o-1,o-2" || m.Topic != "orders" {
			t.Fatalf("message %q: tag %q keys %v topic %q", want, m.Tag, m.Keys, m.Topic)
		}
		if m.MsgID != sent[i].MsgID || m.Offset != sent[i].Offset || m.Partition != sent[i].Partition || m.BrokerID != sent[i].BrokerID {
			t.Fatalf("message %q consumed as %+v, sent as %+v", want, m, sent[i])
		}
		if _, err := time.Parse(time.RFC3339Nano, m.StoreTime); err != nil {
			t.Fatalf("storeTime %q: %v", m.StoreTime, err)
		}
	}

	// Text format and stdin lines; a tag filter.
	c.runIn("a1\na2\n", "produce", "-t", "orders", "--tag", "a", "--quiet")
	_, _, code := c.runIn("b1\n", "produce", "-t", "orders", "--tag", "b")
	if code != 0 {
		t.Fatalf("produce from stdin: exit %d", code)
	}
	out = c.mustRun("consume", "-t", "orders", "--from", "earliest", "--tag", "a", "--count", "2", "--timeout", "20s")
	lines := strings.Fields(out)
	if len(lines) != 2 || !slices.Contains(lines, "a1") || !slices.Contains(lines, "a2") {
		t.Fatalf("tag-filtered consume printed %q", out)
	}
}

func TestConsumeLatestWaitsForNewMessages(t *testing.T) {
	c := newCluster(t, 1, map[string]int{"live": 1}, false)
	c.mustRun("produce", "-t", "live", "-m", "old")
	type result struct {
		out  string
		code int
	}
	done := make(chan result, 1)
	go func() {
		out, _, code := c.run("consume", "-t", "live", "--count", "1", "--timeout", "20s")
		done <- result{out, code}
	}()
	// --from latest resolves the start offset before the new message is produced; give it a
	// moment, then keep producing until the consumer has what it waits for.
	var r result
	for i := 0; ; i++ {
		time.Sleep(300 * time.Millisecond)
		c.mustRun("produce", "-t", "live", "-m", "new", "--quiet")
		select {
		case r = <-done:
		default:
			if i < 30 {
				continue
			}
			t.Fatal("consume --from latest did not finish")
		}
		break
	}
	if r.code != 0 || strings.TrimSpace(r.out) != "new" {
		t.Fatalf("consume latest: exit %d, printed %q", r.code, r.out)
	}
}

func TestGroupsDescribeLag(t *testing.T) {
	c := newCluster(t, 2, map[string]int{"lag": 2}, false)
	c.mustRun("produce", "-t", "lag", "-m", "x", "--count", "20", "--quiet")

	c.mustRun("consume", "-t", "lag", "-g", "billing", "--count", "7", "--timeout", "20s", "--quiet")

	out := c.mustRun("groups", "describe", "billing", "--json")
	var d groupDetail
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("groups describe --json: %v\n%s", err, out)
	}
	if len(d.Consumers) != 0 {
		t.Fatalf("the consumer left; still listed: %+v", d.Consumers)
	}
	if len(d.Partitions) != 4 {
		t.Fatalf("want 4 partitions, got %+v", d.Partitions)
	}
	var committed, maxSum, lagSum int64
	for _, p := range d.Partitions {
		if p.Max == nil {
			t.Fatalf("partition %d-%d: no max (%s)", p.BrokerID, p.Partition, p.Error)
		}
		maxSum += *p.Max
		if p.Committed != nil {
			committed += *p.Committed
			if p.Lag == nil || *p.Lag != *p.Max-*p.Committed {
				t.Fatalf("partition %+v: lag is not max-committed", p)
			}
			lagSum += *p.Lag
		} else if p.Lag != nil {
			t.Fatalf("partition %+v: lag without a commit", p)
		}
	}
	if maxSum != 20 || committed != 7 {
		t.Fatalf("max sum %d (want 20), committed sum %d (want 7)", maxSum, committed)
	}
	if d.TotalLag != lagSum {
		t.Fatalf("totalLag %d != sum of lags %d", d.TotalLag, lagSum)
	}

	// Continue the group: it resumes from its commits, so exactly the 13 others arrive.
	out = c.mustRun("consume", "-t", "lag", "-g", "billing", "--count", "13", "--timeout", "20s", "--format", "json")
	if n := len(jsonLines[messageJSON](t, out)); n != 13 {
		t.Fatalf("second run got %d messages, want 13", n)
	}
	out = c.mustRun("groups", "describe", "billing", "--json")
	d = groupDetail{}
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	if d.TotalLag != 0 {
		t.Fatalf("after consuming everything, lag %d:\n%s", d.TotalLag, out)
	}
	for _, p := range d.Partitions {
		if p.Committed == nil || p.Max == nil || *p.Committed != *p.Max {
			t.Fatalf("partition not fully committed: %+v", p)
		}
	}

	// Human table and group list.
	out = c.mustRun("groups", "describe", "billing")
	if !strings.Contains(out, "total lag: 0") || !strings.Contains(out, "LAG") {
		t.Fatalf("groups describe table:\n%s", out)
	}
	out = c.mustRun("groups", "list", "--json")
	var gs []groupSummary
	if err := json.Unmarshal([]byte(out), &gs); err != nil || len(gs) != 1 || gs[0].Group != "billing" || gs[0].Topics[0] != "lag" {
		t.Fatalf("groups list --json: %v %s", err, out)
	}
}

func TestOffsetsResetToTime(t *testing.T) {
	c := newCluster(t, 1, map[string]int{"hist": 1}, false)
	for _, body := range []string{"a", "b", "c", "d"} {
		c.mustRun("produce", "-t", "hist", "-m", body, "--quiet")
		time.Sleep(30 * time.Millisecond)
	}
	all := jsonLines[messageJSON](t, c.mustRun("consume", "-t", "hist", "--from", "earliest", "--count", "4", "--format", "json", "--timeout", "20s"))
	if len(all) != 4 || *all[2].Body != "c" {
		t.Fatalf("consumed %+v", all)
	}
	// The group reads everything first.
	c.mustRun("consume", "-t", "hist", "-g", "replay", "--count", "4", "--timeout", "20s", "--quiet")

	// Reset to the store time of "c": consumption restarts at "c".
	at := time.UnixMilli(all[2].StoreTimeMs).UTC().Format(time.RFC3339Nano)
	out := c.mustRun("offsets", "reset", "--group", "replay", "--topic", "hist", "--to", at, "--json")
	var res struct {
		Changes []offsetChange `json:"changes"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Changes) != 1 {
		t.Fatalf("offsets reset --json: %v\n%s", err, out)
	}
	if ch := res.Changes[0]; ch.Old == nil || *ch.Old != 4 || ch.New != all[2].Offset {
		t.Fatalf("reset change %+v, want 4 → %d", ch, all[2].Offset)
	}
	out = c.mustRun("consume", "-t", "hist", "-g", "replay", "--count", "1", "--timeout", "20s")
	if strings.TrimSpace(out) != "c" {
		t.Fatalf("after reset to %s the group read %q, want c", at, out)
	}

	// earliest / latest / an offset; --dry-run changes nothing.
	c.mustRun("offsets", "reset", "-g", "replay", "-t", "hist", "--to", "earliest")
	if out := c.mustRun("consume", "-t", "hist", "-g", "replay", "--count", "1", "--timeout", "20s"); strings.TrimSpace(out) != "a" {
		t.Fatalf("after reset to earliest: %q", out)
	}
	c.mustRun("offsets", "reset", "-g", "replay", "-t", "hist", "--to", "3")
	out = c.mustRun("offsets", "reset", "-g", "replay", "-t", "hist", "--to", "latest", "--dry-run")
	if !strings.Contains(out, "dry run") {
		t.Fatalf("dry run output: %s", out)
	}
	if out := c.mustRun("consume", "-t", "hist", "-g", "replay", "--count", "1", "--timeout", "20s"); strings.TrimSpace(out) != "d" {
		t.Fatalf("after reset to offset 3: %q", out)
	}

	// A live consumer of the group blocks the reset (exit 5) unless --force.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		_, _, code := runCLI(t, ctx, c.zk, "", "consume", "-t", "hist", "-g", "replay")
		done <- code
	}()
	zktest.Eventually(t, 20*time.Second, func() bool {
		out, _, code := c.run("groups", "describe", "replay", "--json")
		var d groupDetail
		return code == 0 && json.Unmarshal([]byte(out), &d) == nil && len(d.Consumers) == 1 && d.Partitions[0].Owner != ""
	}, "the live consumer did not register")
	_, errs, code := c.run("offsets", "reset", "-g", "replay", "-t", "hist", "--to", "earliest")
	if code != ExitRefused || !strings.Contains(errs, "live consumers") {
		t.Fatalf("reset with a live consumer: exit %d, stderr %q", code, errs)
	}
	c.mustRun("offsets", "reset", "-g", "replay", "-t", "hist", "--to", "earliest", "--force")
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("interrupted group consumer: exit %d", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the consumer did not stop")
	}
}

func TestQuery(t *testing.T) {
	c := newCluster(t, 2, map[string]int{"q": 1}, false)
	out := c.mustRun("produce", "-t", "q", "-m", "needle", "--key", "k-1", "--json", "--partition", "1-0")
	sent := jsonLines[sentRow](t, out)
	if len(sent) != 1 || sent[0].BrokerID != 1 {
		t.Fatalf("produce --partition 1-0: %s", out)
	}
	c.mustRun("produce", "-t", "q", "-m", "hay", "--key", "k-2", "--partition", "0-0")

	out = c.mustRun("query", "id", strconv.FormatInt(sent[0].MsgID, 10), "--format", "json")
	ms := jsonLines[messageJSON](t, out)
	if len(ms) != 1 || *ms[0].Body != "needle" || ms[0].MsgID != sent[0].MsgID {
		t.Fatalf("query id: %s", out)
	}
	out = c.mustRun("query", "id", strconv.FormatInt(sent[0].MsgID, 10))
	if !strings.Contains(out, "needle") || !strings.Contains(out, "keys=k-1") {
		t.Fatalf("query id (verbose): %s", out)
	}
	out = c.mustRun("query", "key", "q", "k-1", "--json")
	ms = jsonLines[messageJSON](t, out)
	if len(ms) != 1 || *ms[0].Body != "needle" {
		t.Fatalf("query key: %s", out)
	}
	// Not found: an id past the end of broker 1's log, an unknown key, an unknown broker id.
	_, _, code := c.run("query", "id", strconv.FormatInt(sent[0].MsgID+1<<20, 10))
	if code != ExitNotFound {
		t.Fatalf("query id of a missing message: exit %d", code)
	}
	if _, _, code := c.run("query", "key", "q", "nope"); code != ExitNotFound {
		t.Fatalf("query key nope: exit %d", code)
	}
	if _, _, code := c.run("query", "id", strconv.FormatInt(int64(9)<<48, 10)); code != ExitNotFound {
		t.Fatalf("query id on broker 9: exit %d", code)
	}
}

func TestAdminJSONAndTables(t *testing.T) {
	c := newCluster(t, 2, map[string]int{"t1": 3, "t2": 1}, false)
	c.mustRun("produce", "-t", "t1", "-m", "x", "--count", "9", "--quiet")

	var bs []brokerRow
	if err := json.Unmarshal([]byte(c.mustRun("brokers", "--json")), &bs); err != nil || len(bs) != 2 {
		t.Fatalf("brokers --json: %v %+v", err, bs)
	}
	for i, b := range bs {
		if b.ID != i || b.Role != "master" || !b.Up || b.Version == "" || b.Address != c.brokers[i].Addr {
			t.Fatalf("broker row %+v (broker at %s)", b, c.brokers[i].Addr)
		}
	}
	var ts []topicSummary
	if err := json.Unmarshal([]byte(c.mustRun("topics", "--json")), &ts); err != nil || len(ts) != 2 {
		t.Fatalf("topics --json: %v %+v", err, ts)
	}
	if ts[0].Topic != "t1" || ts[0].Partitions != 6 || len(ts[0].Brokers) != 2 || !ts[0].Publish || !ts[0].Subscribe {
		t.Fatalf("topic summary %+v", ts[0])
	}
	var d topicDetail
	if err := json.Unmarshal([]byte(c.mustRun("topics", "describe", "t1", "--json")), &d); err != nil {
		t.Fatal(err)
	}
	if d.Messages != 9 || len(d.Partitions) != 6 {
		t.Fatalf("describe t1: %+v", d)
	}
	for _, p := range d.Partitions {
		if p.Min != 0 || p.Max != p.Messages || p.Error != "" {
			t.Fatalf("partition %+v", p)
		}
	}
	table := c.mustRun("topics", "describe", "t1")
	if !strings.Contains(table, "PARTITION") || !strings.Contains(table, "1-2") || !strings.Contains(table, "9 messages") {
		t.Fatalf("describe table:\n%s", table)
	}
	table = c.mustRun("brokers")
	if !strings.Contains(table, c.brokers[1].Addr) || !strings.Contains(table, "up") {
		t.Fatalf("brokers table:\n%s", table)
	}

	var st map[string]string
	if err := json.Unmarshal([]byte(c.mustRun("stats", c.brokers[0].Addr, "--json")), &st); err != nil || st["version"] == "" {
		t.Fatalf("stats --json: %v %v", err, st)
	}
	if out := c.mustRun("stats", "1", "t1"); !strings.Contains(out, "message_count") {
		t.Fatalf("stats 1 t1:\n%s", out)
	}
	var v map[string]string
	if err := json.Unmarshal([]byte(c.mustRun("version", "--json", "--broker", c.brokers[0].Addr)), &v); err != nil || v["broker"] == "" || v["version"] == "" {
		t.Fatalf("version --json: %v %v", err, v)
	}
}

func TestExitCodes(t *testing.T) {
	c := newCluster(t, 1, map[string]int{"ec": 1}, false)
	cases := []struct {
		args []string
		code int
	}{
		{[]string{"no-such-command"}, ExitUsage},
		{[]string{"produce", "-m", "x"}, ExitUsage},              // --topic missing
		{[]string{"produce", "-t", "ec", "--bogus"}, ExitUsage},  // unknown flag
		{[]string{"produce", "-t", "a/b", "-m", "x"}, ExitUsage}, // bad topic name
		{[]string{"topics", "describe"}, ExitUsage},              // missing argument
		{[]string{"consume", "-t", "ec", "--format", "xml"}, ExitUsage},
		{[]string{"offsets", "reset", "-g", "g", "-t", "ec", "--to", "yesterday"}, ExitUsage},
		{[]string{"broker"}, ExitUsage}, // no -c
		{[]string{"topics", "describe", "nope"}, ExitNotFound},
		{[]string{"groups", "describe", "nope"}, ExitNotFound},
		{[]string{"consume", "-t", "nope", "--count", "1"}, ExitNotFound},
		{[]string{"produce", "-t", "ec", "-m", "x", "--partition", "7"}, ExitNotFound},
		{[]string{"produce", "-t", "unaccepted", "-m", "x", "--broker", c.brokers[0].Addr}, ExitRefused},
		{[]string{"consume", "-t", "ec", "--count", "1", "--timeout", "300ms"}, ExitTimeout},
		{[]string{"stats", fmt.Sprintf("127.0.0.1:%d", zktest.FreePort(t))}, ExitUnavailable},
		{[]string{"brokers", "--zk", fmt.Sprintf("127.0.0.1:%d", zktest.FreePort(t)), "--connect-timeout", "1s"}, ExitUnavailable},
		{[]string{"version"}, ExitOK},
		{[]string{"completion", "bash"}, ExitOK},
	}
	for _, tc := range cases {
		out, errs, code := c.run(tc.args...)
		if code != tc.code {
			t.Errorf("metaq %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(tc.args, " "), code, tc.code, out, errs)
		}
		if code != 0 && code != ExitTimeout && strings.TrimSpace(errs) == "" {
			t.Errorf("metaq %s: exit %d without a message", strings.Join(tc.args, " "), code)
		}
	}
}

func TestStandaloneBrokerDirect(t *testing.T) {
	b := brokertest.RunBroker(t, brokertest.Options{Topics: map[string]int{"solo": 3}})
	out, errs, code := runCLI(t, context.Background(), "", "", "produce", "-t", "solo", "-m", "p2", "--broker", b.Addr, "--partition", "2", "--json")
	if code != 0 {
		t.Fatalf("produce --broker: %d %s", code, errs)
	}
	if s := jsonLines[sentRow](t, out); len(s) != 1 || s[0].Partition != 2 || s[0].BrokerID != 0 {
		t.Fatalf("sent %s", out)
	}
	out, errs, code = runCLI(t, context.Background(), "", "", "consume", "-t", "solo", "--broker", b.Addr, "--from", "earliest", "--count", "1", "--timeout", "10s")
	if code != 0 || strings.TrimSpace(out) != "p2" {
		t.Fatalf("consume --broker: exit %d out %q err %q", code, out, errs)
	}
}

func TestParseTime(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"2026-11-29T10:00:00Z":        time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC),
		"2026-11-29T10:00:00.5+01:00": time.Date(2026, 11, 29, 9, 0, 0, 5e8, time.UTC),
		"-90m":                        now.Add(-90 * time.Minute),
		"@1795955448937":              time.UnixMilli(1795955448937),
	} {
		got, err := parseTime(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"yesterday", "", "-x", "@-1"} {
		if _, err := parseTime(bad, now); err == nil {
			t.Errorf("parseTime(%q) accepted", bad)
		}
	}
}

func TestDescribeWithABrokerGone(t *testing.T) {
	c := newCluster(t, 2, map[string]int{"gone": 1}, false)
	c.mustRun("produce", "-t", "gone", "-m", "x", "--count", "4", "--quiet")
	c.mustRun("consume", "-t", "gone", "-g", "g", "--count", "4", "--timeout", "20s", "--quiet")
	c.brokers[1].Stop() // unregisters: its partition is no longer in ZooKeeper
	zktest.Eventually(t, 20*time.Second, func() bool {
		out, _, code := c.run("topics", "describe", "gone", "--json")
		var d topicDetail
		return code == 0 && json.Unmarshal([]byte(out), &d) == nil && len(d.Partitions) == 1
	}, "broker 1's partition still registered")
	out, _, code := c.run("groups", "describe", "g", "--json")
	if code != ExitUnavailable {
		t.Fatalf("groups describe with an offset on a gone broker: exit %d\n%s", code, out)
	}
	var d groupDetail
	if err := json.Unmarshal([]byte(out), &d); err != nil || len(d.Partitions) != 2 {
		t.Fatalf("%v %s", err, out)
	}
	if p := d.Partitions[1]; p.BrokerID != 1 || p.Error == "" || p.Committed == nil || p.Lag != nil {
		t.Fatalf("gone broker's partition: %+v", p)
	}
	if p := d.Partitions[0]; p.Error != "" || p.Lag == nil || *p.Lag != 0 {
		t.Fatalf("live partition: %+v", p)
	}
}
