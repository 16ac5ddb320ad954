package broker

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/metaqgo/metaq/conf"
)

// Online topic configuration (docs/zookeeper.md, "Online topic
// configuration"): `metaq topics create|alter|delete` write
// /meta/config/topics/<topic> in ZooKeeper; brokers watch it (topicwatch.go)
// and apply it without a restart. `metaq broker reload` / SIGHUP re-read
// server.ini's topic sections. Both land in a topicOverlay attached to the
// broker's *conf.Config, which topicConfig consults everywhere the broker
// asks "is this topic accepted, and how" (the topic policy, the ZooKeeper
// registration, per-topic retention).
//
// Precedence: an exact [topic=<name>] section of server.ini wins over the
// ZooKeeper configuration of that topic (the operator's file is the
// authority on its broker); the ZooKeeper configuration wins over wildcard
// sections and [system] defaults, and accepts a topic no section accepts.

// TopicOverride is the JSON of a /meta/config/topics/<topic> node. Absent
// fields keep what server.ini (or the [system] defaults) say.
type TopicOverride struct {
	NumPartitions   *int    `json:"numPartitions,omitempty"`
	DeletePolicy    *string `json:"deletePolicy,omitempty"` // deletePolicy syntax: "delete,72", "delete,30m", "archive"
	AcceptPublish   *bool   `json:"acceptPublish,omitempty"`
	AcceptSubscribe *bool   `json:"acceptSubscribe,omitempty"`
}

// ParseTopicOverride parses and validates a node's data.
func ParseTopicOverride(data []byte) (TopicOverride, error) {
	var o TopicOverride
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return o, fmt.Errorf("bad topic configuration %q: %w", data, err)
	}
	return o, o.Validate()
}

// Validate checks the values as server.ini's keys are checked.
func (o TopicOverride) Validate() error {
	if o.NumPartitions != nil && (*o.NumPartitions < 1 || *o.NumPartitions > conf.MaxNumPartitions) {
		return fmt.Errorf("numPartitions %d is out of range 1..%d", *o.NumPartitions, conf.MaxNumPartitions)
	}
	if o.DeletePolicy != nil {
		if _, err := conf.ParseDeletePolicy(*o.DeletePolicy); err != nil {
			return fmt.Errorf("deletePolicy: %w", err)
		}
	}
	return nil
}

// JSON renders the node's data.
func (o TopicOverride) JSON() []byte {
	b, _ := json.Marshal(o)
	return b
}

// topicOverlay is what changes a Config's topics at run time.
type topicOverlay struct {
	online   atomic.Pointer[map[string]TopicOverride] // from ZooKeeper
	reloaded atomic.Pointer[conf.Config]              // server.ini re-read (topic sections used)
}

var overlays sync.Map // *conf.Config → *topicOverlay

func overlayOf(c *conf.Config) *topicOverlay {
	if v, ok := overlays.Load(c); ok {
		return v.(*topicOverlay)
	}
	v, _ := overlays.LoadOrStore(c, &topicOverlay{})
	return v.(*topicOverlay)
}

func dropOverlay(c *conf.Config) { overlays.Delete(c) }

// topicConfig is c.Topic with the overlay applied (see the precedence above).
func topicConfig(c *conf.Config, name string) (conf.Topic, bool) {
	v, ok := overlays.Load(c)
	if !ok {
		return c.Topic(name)
	}
	ov := v.(*topicOverlay)
	base := c
	if r := ov.reloaded.Load(); r != nil {
		base = r
	}
	t, accepted := base.Topic(name)
	var o TopicOverride
	if m := ov.online.Load(); m != nil {
		var has bool
		if o, has = (*m)[name]; !has {
			return t, accepted
		}
	} else {
		return t, accepted
	}
	if accepted && t.Pattern == name {
		return t, true // an exact server.ini section wins
	}
	if !accepted {
		s := base.System
		t = conf.Topic{Name: name, Pattern: "zookeeper", NumPartitions: s.NumPartitions, UnflushThreshold: s.UnflushThreshold,
			UnflushInterval: s.UnflushInterval, DeletePolicy: s.DeletePolicy, DeleteWhen: s.DeleteWhen,
			AcceptPublish: s.AcceptPublish, AcceptSubscribe: s.AcceptSubscribe, Stat: s.Stat, DataPath: s.DataPath}
	}
	if o.NumPartitions != nil {
		t.NumPartitions = *o.NumPartitions
	}
	if o.DeletePolicy != nil {
		if r, err := conf.ParseDeletePolicy(*o.DeletePolicy); err == nil {
			t.DeletePolicy = r
		}
	}
	if o.AcceptPublish != nil {
		t.AcceptPublish = *o.AcceptPublish
	}
	if o.AcceptSubscribe != nil {
		t.AcceptSubscribe = *o.AcceptSubscribe
	}
	return t, true
}

// onlineTopics lists the topics configured in ZooKeeper.
func onlineTopics(c *conf.Config) []string {
	v, ok := overlays.Load(c)
	if !ok {
		return nil
	}
	m := v.(*topicOverlay).online.Load()
	if m == nil {
		return nil
	}
	out := make([]string, 0, len(*m))
	for k := range *m {
		out = append(out, k)
	}
	return out
}

// reloadSettings re-reads every interned topic's settings from the policy:
// changed topics get a new state (counters carried over), topics no longer
// accepted are dropped (their requests are refused from now on; their data
// stays until retention; their counters are kept in t.gone). It returns
// the names that changed.
func (t *topicTable) reloadSettings() (changed, dropped []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.m.Load()
	m := make(map[string]*topicState, len(old))
	for name, ts := range old {
		settings, ok := t.policy.Lookup(name)
		switch {
		case !ok:
			if t.gone == nil {
				t.gone = map[string]*topicState{}
			}
			t.gone[name] = ts
			dropped = append(dropped, name)
		case settings == ts.settings:
			m[name] = ts
		default:
			n := &topicState{name: ts.name, settings: settings}
			n.notified.Store(ts.notified.Load())
			n.rr.Store(ts.rr.Load())
			n.carry(ts)
			m[name] = n
			changed = append(changed, name)
		}
	}
	t.m.Store(&m)
	return changed, dropped
}
