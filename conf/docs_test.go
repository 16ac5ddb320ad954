package conf

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/pop"
)

// docKey is one row of a key table of docs/configuration.md.
type docKey struct {
	section string // "system", "zookeeper", …, "topic=t"
	key     string
	def     string // the default cell
	meaning string
	status  string // the status cell ("" in a table without one)
}

// parseConfigDoc reads the key tables of docs/configuration.md, section by
// section (the "## `[…]`" headings).
func parseConfigDoc(t *testing.T) []docKey {
	t.Helper()
	text, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	heading := regexp.MustCompile("^## `\\[([a-z]+)(=<name>)?\\]`")
	var out []docKey
	section := ""
	for _, l := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(l, "## ") {
			section = ""
			if m := heading.FindStringSubmatch(l); m != nil {
				section = m[1]
				if m[2] != "" {
					section = "topic=t"
				}
			}
			continue
		}
		if section == "" || !strings.HasPrefix(l, "| `") {
			continue
		}
		cells := strings.Split(strings.ReplaceAll(l, `\|`, "¦"), "|")
		if len(cells) < 5 {
			t.Fatalf("docs/configuration.md: short table row %q", l)
		}
		key := strings.TrimSpace(cells[1])
		key = key[1 : strings.IndexByte(key[1:], '`')+1] // the first `…`, without *(metaq)*
		d := docKey{section: section, key: key, def: strings.TrimSpace(cells[2]), meaning: strings.TrimSpace(cells[3])}
		if len(cells) > 5 {
			d.status = strings.TrimSpace(cells[4])
		}
		out = append(out, d)
	}
	if len(out) < 80 {
		t.Fatalf("found only %d keys in docs/configuration.md's tables: is the reader broken?", len(out))
	}
	return out
}

// iniWith is a minimal server.ini (brokerId 0) with key=value in section.
func iniWith(section, key, value string) string {
	s := "[system]\n"
	if section != "system" || key != "brokerId" {
		s += "brokerId=0\n"
	}
	if section != "system" {
		s += "[" + section + "]\n"
	}
	return s + key + "=" + value + "\n"
}

// keyErrors returns the problems of the file that name key (and every
// problem when the file does not parse at all).
func keyErrors(t *testing.T, ini, key string) (problems []string, cfg *Config) {
	t.Helper()
	cfg, err := Parse([]byte(ini), t.TempDir()+"/server.ini")
	var all []string
	for _, e := range unjoin(err) {
		var ce *Error
		if errors.As(e, &ce) && ce.Key != key {
			continue
		}
		all = append(all, e.Error())
	}
	return all, cfg
}

func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// docValue turns a documented default into the value to write in the file,
// or "" when the default is not a literal value (computed, a reference to
// another key, empty, required).
func docValue(def string) string {
	def = strings.ReplaceAll(def, "**", "")
	if strings.HasPrefix(def, "`") {
		v := def[1 : strings.IndexByte(def[1:], '`')+1]
		if strings.HasPrefix(v, "[") || regexp.MustCompile(`^[a-z][A-Za-z]*$`).MatchString(v) && v != "all" {
			return "" // `[system] numPartitions`, `dataPath`: inherited from another key
		}
		return v
	}
	if m := regexp.MustCompile(`^(true|false)(?:$| \()`).FindStringSubmatch(def); m != nil {
		return m[1]
	}
	if m := regexp.MustCompile(`^(-?[0-9]+)(?: ([KMGT])iB)?(?:$| \(| =)`).FindStringSubmatch(def); m != nil {
		return m[1] + strings.ToLower(m[2])
	}
	return ""
}

// effective is what the broker makes of c: the keys whose zero value means
// their default (the delay and delivery keys, defaulted where they are used)
// take that default.
func effective(c *Config) *Config {
	e := *c
	e.Path, e.Warnings = "", nil
	s := &e.System
	s.Delay.Levels, s.Delay.MaxReconsumeTimes = s.Delay.DelayLevels(), s.Delay.MaxReconsume()
	p := &s.Pop
	if p.MaxDeliveries <= 0 {
		p.MaxDeliveries = pop.DefaultMaxDeliveries
	}
	if p.MaxInflight <= 0 {
		p.MaxInflight = pop.DefaultMaxInflight
	}
	if p.MaxGroups <= 0 {
		p.MaxGroups = pop.DefaultMaxGroups
	}
	if p.SpillAfterMs <= 0 {
		p.SpillAfterMs = int(pop.DefaultSpillAfter / time.Millisecond)
	}
	if p.MemoryMb == 0 {
		p.MemoryMb = pop.DefaultSpillMemory >> 20
	}
	return &e
}

// TestConfigDocMatchesParser checks docs/configuration.md's key tables
// against the parser both ways: every documented key is accepted in the
// section it is documented in; every key the parser knows is documented in
// its section; an unknown key is reported; a documented literal default
// written out gives the configuration the key's absence gives; and a
// documented range (`lo..hi`, `≥ n`, `> 0`) holds at both ends and fails
// one past them.
func TestConfigDocMatchesParser(t *testing.T) {
	t.Parallel()
	docs := parseConfigDoc(t)
	documented := map[string]bool{}
	for _, d := range docs {
		documented[d.section+" "+d.key] = true
	}
	known := map[string][]keyDef{"system": systemKeys, "zookeeper": zkKeys, "slave": slaveKeys,
		"replication": replicationKeys, "security": securityKeys}
	ignoredKey := map[string]bool{}
	for sec, defs := range known {
		for _, d := range defs {
			ignoredKey[sec+" "+d.name] = d.status == ignored
			if !documented[sec+" "+d.name] {
				t.Errorf("[%s] %s is read by the parser but not in docs/configuration.md's [%s] table", sec, d.name, sec)
			}
		}
	}
	for _, d := range topicKeys {
		ignoredKey["topic=t "+d.name] = d.status == ignored
		if !documented["topic=t "+d.name] {
			t.Errorf("[topic=…] %s is read by the parser but not in docs/configuration.md's [topic=<name>] table", d.name)
		}
	}
	ignoredKey["topic=t group.<name>"] = true
	// A key the parser ignores is logged as a warning when set: the docs
	// must say "ignored" for exactly those.
	for _, d := range docs {
		if d.status != "" && strings.HasPrefix(d.status, "ignored") != ignoredKey[d.section+" "+d.key] {
			t.Errorf("docs/configuration.md gives [%s] %s the status %q; the parser ignores it: %v", d.section, d.key, d.status, ignoredKey[d.section+" "+d.key])
		}
	}
	for _, sec := range []string{"system", "zookeeper", "slave", "replication", "security", "topic=t"} {
		if p, _ := keyErrors(t, iniWith(sec, "noSuchKeyAtAll", "1"), "noSuchKeyAtAll"); len(p) == 0 || !strings.Contains(p[0], "unknown key") {
			t.Errorf("[%s] noSuchKeyAtAll: %q, want an unknown key", sec, p)
		}
	}

	base, err := Parse([]byte("[system]\nbrokerId=0\n"), t.TempDir()+"/server.ini")
	if err != nil {
		t.Fatalf("a file with only brokerId: %v", err)
	}
	checked, ranges := 0, 0
	for _, d := range docs {
		key := d.key
		if key == "group.<name>" {
			key = "group.g"
		}
		// Accepted where documented (a value that is wrong for the key is
		// an error about its value, not an unknown key).
		for _, v := range []string{"x", "1"} {
			p, _ := keyErrors(t, iniWith(d.section, key, v), key)
			for _, e := range p {
				if strings.Contains(e, "unknown key") || strings.Contains(e, "not allowed in") {
					t.Errorf("docs/configuration.md documents [%s] %s, which the parser refuses: %s", d.section, d.key, e)
				}
			}
		}
		if strings.HasPrefix(d.section, "topic=") {
			continue // defaults are inherited from [system]
		}
		if v := docValue(d.def); v != "" {
			checked++
			p, cfg := keyErrors(t, iniWith(d.section, key, v), key)
			if len(p) > 0 {
				t.Errorf("[%s] %s=%s (its documented default) is refused: %q", d.section, key, v, p)
			} else if diff := configDiff(reflect.ValueOf(*effective(cfg)), reflect.ValueOf(*effective(base)), "Config"); len(diff) > 0 {
				t.Errorf("[%s] %s=%s (its documented default) gives another configuration than leaving it unset: %s",
					d.section, key, v, strings.Join(diff, "; "))
			}
		}
		for _, r := range docRanges(d.meaning) {
			ranges++
			for _, v := range r.ok {
				if p, _ := keyErrors(t, iniWith(d.section, key, v), key); len(p) > 0 {
					t.Errorf("[%s] %s=%s is within its documented range %q but refused: %q", d.section, key, v, r.text, p)
				}
			}
			for _, v := range r.bad {
				if p, _ := keyErrors(t, iniWith(d.section, key, v), key); len(p) == 0 {
					t.Errorf("[%s] %s=%s is outside its documented range %q but accepted", d.section, key, v, r.text)
				}
			}
		}
	}
	t.Logf("%d keys, %d defaults, %d ranges checked", len(docs), checked, ranges)
	if checked < 50 || ranges < 15 {
		t.Errorf("checked only %d defaults and %d ranges: is docValue or docRanges broken?", checked, ranges)
	}
}

// configDiff lists the fields of two configurations that differ, by path.
func configDiff(a, b reflect.Value, path string) []string {
	if a.Kind() == reflect.Struct && a.Type().PkgPath() == reflect.TypeFor[Config]().PkgPath() {
		var out []string
		for i := range a.NumField() {
			out = append(out, configDiff(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name)...)
		}
		return out
	}
	if !reflect.DeepEqual(a.Interface(), b.Interface()) {
		return []string{fmt.Sprintf("%s = %v, unset %v", path, a.Interface(), b.Interface())}
	}
	return nil
}

type docRange struct {
	text    string
	ok, bad []string
}

// docRanges reads the ranges a key's meaning states: `lo..hi` (hi may
// carry a unit: `1..1 GiB`), `≥ n.` and `> 0` (a `≥ 0 starts …` that
// describes a case is not a range).
func docRanges(meaning string) []docRange {
	var out []docRange
	for _, m := range regexp.MustCompile(`(-?[0-9]+)\.\.([0-9]+)( GiB)?`).FindAllStringSubmatch(meaning, -1) {
		lo, _ := strconv.ParseInt(m[1], 10, 64)
		hi, _ := strconv.ParseInt(m[2], 10, 64)
		if m[3] != "" {
			hi <<= 30
		}
		out = append(out, docRange{text: m[0],
			ok:  []string{strconv.FormatInt(lo, 10), strconv.FormatInt(hi, 10)},
			bad: []string{strconv.FormatInt(lo-1, 10), strconv.FormatInt(hi+1, 10)}})
	}
	for _, m := range regexp.MustCompile(`≥ ([0-9]+)\.`).FindAllStringSubmatch(meaning, -1) {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		out = append(out, docRange{text: m[0], ok: []string{m[1]}, bad: []string{strconv.FormatInt(n-1, 10)}})
	}
	if regexp.MustCompile(`(?:^|; )> 0`).MatchString(meaning) {
		out = append(out, docRange{text: "> 0", ok: []string{"1"}, bad: []string{"0"}})
	}
	return slices.Clip(out)
}

// TestDelayAndDeliveryKeysRefuseZero: the delay and delivery keys keep 0 for
// "unset" and the broker substitutes the default for it, so a 0 or negative
// value written in the file silently ran as the default (maxReconsumeTimes=0,
// RocketMQ's "straight to the dead-letter queue", gave 16 give-backs;
// popMemoryMb=0 kept 32 MiB in memory). Such values are refused instead.
func TestDelayAndDeliveryKeysRefuseZero(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key     string
		ok, bad []string
	}{
		{"maxReconsumeTimes", []string{"1", "16"}, []string{"0", "-1"}},
		{"maxDeliveries", []string{"1", "5"}, []string{"0", "-1"}},
		{"popMaxInflight", []string{"1", "2000000"}, []string{"0", "-1"}},
		{"popMaxGroups", []string{"1", "10000"}, []string{"0", "-1"}},
		{"popSpillAfterMs", []string{"1", "5000"}, []string{"0", "-1"}},
		{"popMemoryMb", []string{"-1", "1", "32"}, []string{"0", "-2"}},
	} {
		for _, v := range tc.ok {
			if p, _ := keyErrors(t, iniWith("system", tc.key, v), tc.key); len(p) > 0 {
				t.Errorf("%s=%s refused: %q", tc.key, v, p)
			}
		}
		for _, v := range tc.bad {
			if p, _ := keyErrors(t, iniWith("system", tc.key, v), tc.key); len(p) == 0 {
				t.Errorf("%s=%s accepted (the broker would not run with what the file says)", tc.key, v)
			}
		}
	}
}
