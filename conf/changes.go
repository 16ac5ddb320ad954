package conf

import (
	"reflect"
	"sort"
	"strings"
)

// StaticChanges lists the keys outside the [topic=…] sections whose values
// differ between c and next, as "[section] key", sorted. A reload of
// server.ini (SIGHUP, broker/topicwatch.go) applies only topic sections, and
// those inherit [system]: it refuses a file where this list is not empty
// rather than apply part of it (docs/configuration.md, "Reloading").
func (c *Config) StaticChanges(next *Config) []string {
	var out []string
	for _, s := range staticSections(c, next) {
		diffFields(s.name, s.defs, "", s.a, s.b, &out)
	}
	sort.Strings(out)
	return out
}

type staticSection struct {
	name string
	defs []keyDef
	a, b reflect.Value
}

func staticSections(c, next *Config) []staticSection {
	v := func(x any) reflect.Value { return reflect.ValueOf(x).Elem() }
	return []staticSection{
		{"system", systemKeys, v(&c.System), v(&next.System)},
		{"zookeeper", zkKeys, v(&c.ZK), v(&next.ZK)},
		{"slave", slaveKeys, v(&c.Slave), v(&next.Slave)},
		{"replication", replicationKeys, v(&c.Replication), v(&next.Replication)},
		{secSection, securityKeys, v(&c.Security), v(&next.Security)},
	}
}

// diffFields compares a and b field by field; the fields of a group of keys
// (System.Delay, System.Pop) are compared one by one.
func diffFields(section string, defs []keyDef, prefix string, a, b reflect.Value, out *[]string) {
	t := a.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if isGroup(f.Type) {
			diffFields(section, defs, prefix+f.Name, a.Field(i), b.Field(i), out)
			continue
		}
		key := fieldKey(section, defs, prefix, f.Name)
		if reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			continue
		}
		if key == "" {
			key = prefix + f.Name // not in the key tables (StaticChanges' test fails)
		}
		*out = append(*out, "["+section+"] "+key)
	}
}

// isGroup reports whether a field's type groups several keys.
func isGroup(t reflect.Type) bool { return t == reflect.TypeOf(Delay{}) || t == reflect.TypeOf(Pop{}) }

// keyAliases name the keys of the fields whose names do not lead to them.
var keyAliases = map[string]string{"DelayLevels": "messageDelayLevel"}

// fieldKey is the key of a section's field: the key whose name, without
// its section's prefix (zk.zk, slave), is the field's name, with or without
// its group's (popMaxInflight for Pop.MaxInflight, maxReconsumeTimes for
// Delay.MaxReconsumeTimes), or starts with it (putDataTimeoutMs for
// PutDataTimeout; the shortest such key). "" when none.
func fieldKey(section string, defs []keyDef, prefix, field string) string {
	if k, ok := keyAliases[prefix+field]; ok {
		return k
	}
	if k := matchKey(section, defs, strings.ToLower(prefix+field)); k != "" || prefix == "" {
		return k
	}
	return matchKey(section, defs, strings.ToLower(field))
}

func matchKey(section string, defs []keyDef, want string) string {
	best := ""
	for _, d := range defs {
		n := strings.ToLower(d.name)
		switch section {
		case "zookeeper":
			n = strings.TrimPrefix(n, "zk.zk")
		case "slave":
			n = strings.TrimPrefix(n, "slave")
		}
		if n == want {
			return d.name
		}
		if strings.HasPrefix(n, want) && (best == "" || len(d.name) < len(best)) {
			best = d.name
		}
	}
	return best
}
