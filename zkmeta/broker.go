package zkmeta

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
)

// Broker identifies a broker process in ZooKeeper.
type Broker struct {
	ID      int    // brokerId
	SlaveID int    // MetaQ's slaveId: MasterSlaveID (-1) for a master, 0, 1, … for slave n
	Host    string // hostName, the address advertised to clients
	Port    int    // serverPort
}

// MasterBroker describes master broker id listening on host:port.
func MasterBroker(id int, host string, port int) Broker {
	return Broker{ID: id, SlaveID: MasterSlaveID, Host: host, Port: port}
}

// SlaveBroker describes slave slaveID of broker id listening on host:port.
func SlaveBroker(id, slaveID int, host string, port int) Broker {
	return Broker{ID: id, SlaveID: slaveID, Host: host, Port: port}
}

// IsSlave reports whether b is a slave.
func (b Broker) IsSlave() bool { return b.SlaveID >= 0 }

// URI is the data of b's node: "meta://host:port".
func (b Broker) URI() string { return BrokerURI(b.Host, b.Port) }

// Role is b's name in the topic directories: "<id>-m" or "<id>-s<n>".
func (b Broker) Role() string { return BrokerRole(b.ID, b.SlaveID) }

func (b Broker) String() string { return b.Role() + "@" + b.URI() }

// Validate checks the fields.
func (b Broker) Validate() error {
	switch {
	case b.ID < 0:
		return fmt.Errorf("zkmeta: broker id %d is negative", b.ID)
	case b.SlaveID < MasterSlaveID:
		return fmt.Errorf("zkmeta: slave id %d (want -1 for a master, or >= 0)", b.SlaveID)
	case b.Host == "":
		return errors.New("zkmeta: broker host is empty")
	case b.Port <= 0 || b.Port > 65535:
		return fmt.Errorf("zkmeta: broker port %d out of range", b.Port)
	}
	return nil
}

// TopicConfig is what a broker publishes about one topic.
type TopicConfig struct {
	NumPartitions   int  // partitions of the topic on this broker
	AcceptPublish   bool // register under topics-pub (producers may put); never for a slave
	AcceptSubscribe bool // register under topics-sub (consumers may get)
}

// DefaultTopicConfig accepts puts and gets on n partitions (MetaQ's defaults).
func DefaultTopicConfig(n int) TopicConfig {
	return TopicConfig{NumPartitions: n, AcceptPublish: true, AcceptSubscribe: true}
}

// BrokerRegistry keeps a broker's ephemeral nodes in ZooKeeper (docs/zookeeper.md, "The layout"):
//
//	/brokers/ids/<id>/master                 meta://host:port      (slave<n> for a slave)
//	/brokers/topics/<topic>/<id>-m           <numPartitions>       (-s<n> for a slave)
//	/brokers/topics-pub/<topic>/<id>-m       {"numParts":N,"broker":"<id>-m"}   if AcceptPublish (masters only)
//	/brokers/topics-sub/<topic>/<id>-m       {"numParts":N,"broker":"<id>-m"}   if AcceptSubscribe
//
// The broker node is created first and the topic nodes only while it exists. Everything is
// re-created after a session expiry; a node still held by the previous run's session is waited
// for (Config.StaleNodeWait, logged). Nothing here blocks on ZooKeeper except Register, Wait and
// the Unregister methods: a broker can start serving before ZooKeeper is reachable.
type BrokerRegistry struct {
	c *Client
	b Broker

	mu     sync.Mutex
	node   *EphemeralNode // nil while not started
	topics map[string]*topicReg
	// elected: the master node is created by the election (zkmeta/ha.go), never by the registry
	elected bool
}

type topicReg struct {
	cfg             TopicConfig
	plain, pub, sub *EphemeralNode
}

// NewBrokerRegistry prepares the registration of b; nothing is written until Start or Register.
func NewBrokerRegistry(c *Client, b Broker) (*BrokerRegistry, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return &BrokerRegistry{c: c, b: b, topics: map[string]*topicReg{}}, nil
}

// Broker is the registered broker.
func (r *BrokerRegistry) Broker() Broker { return r.b }

// Start begins registering the broker node and every topic registered so far, in the
// background, and returns at once (idempotent). Use Wait to know when it is done.
func (r *BrokerRegistry) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.node != nil {
		return nil
	}
	p := r.c.paths.BrokerNode(r.b.ID, r.b.SlaveID)
	n, err := r.c.ephemeralNode(p, []byte(r.b.URI()), nil, r.elected && !r.b.IsSlave())
	if err != nil {
		return err
	}
	r.node = n
	names := make([]string, 0, len(r.topics))
	for t := range r.topics {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		if err := r.applyLocked(t, r.topics[t]); err != nil {
			return err
		}
	}
	return nil
}

// Register is Start followed by Wait.
func (r *BrokerRegistry) Register(ctx context.Context) error {
	if err := r.Start(); err != nil {
		return err
	}
	return r.Wait(ctx)
}

// Wait blocks until the broker node and every topic node are registered in the current session.
// It returns a *ConflictError when another session still holds the broker node after
// Config.StaleNodeWait (another live broker with this id?); registration goes on in the
// background either way.
func (r *BrokerRegistry) Wait(ctx context.Context) error {
	r.mu.Lock()
	if r.node == nil {
		r.mu.Unlock()
		return errors.New("zkmeta: broker registry not started")
	}
	nodes := []*EphemeralNode{r.node}
	for _, t := range r.topics {
		nodes = append(nodes, t.nodes()...)
	}
	r.mu.Unlock()
	for _, n := range nodes {
		if err := n.Wait(ctx); err != nil && !errors.Is(err, ErrRemoved) {
			return err
		}
	}
	return nil
}

// Registered reports whether every node is registered in the current session.
func (r *BrokerRegistry) Registered() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.node == nil || !r.node.Registered() {
		return false
	}
	for _, t := range r.topics {
		for _, n := range t.nodes() {
			if !n.Registered() {
				return false
			}
		}
	}
	return true
}

func (t *topicReg) nodes() []*EphemeralNode {
	var out []*EphemeralNode
	for _, n := range []*EphemeralNode{t.plain, t.pub, t.sub} {
		if n != nil {
			out = append(out, n)
		}
	}
	return out
}

// RegisterTopic publishes topic with cfg (or updates it when cfg changed). It never blocks on
// ZooKeeper, so the broker may call it on the first put of a topic accepted through a wildcard;
// the nodes appear as soon as the broker is registered. Use WaitTopic to wait for them.
func (r *BrokerRegistry) RegisterTopic(topic string, cfg TopicConfig) error {
	if err := ValidateName("topic", topic); err != nil {
		return err
	}
	if cfg.NumPartitions < 0 {
		return fmt.Errorf("zkmeta: topic %s: negative partition count %d", topic, cfg.NumPartitions)
	}
	if r.b.IsSlave() {
		cfg.AcceptPublish = false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.topics[topic]
	if t == nil {
		t = &topicReg{}
		r.topics[topic] = t
	} else if t.cfg == cfg && (r.node == nil || t.plain != nil) {
		return nil
	}
	t.cfg = cfg
	if r.node == nil {
		return nil
	}
	return r.applyLocked(topic, t)
}

// applyLocked makes t's nodes match t.cfg (r.mu held).
func (r *BrokerRegistry) applyLocked(topic string, t *topicReg) error {
	p, c, role := r.c.paths, r.c, r.b.Role()
	plain := []byte(strconv.Itoa(t.cfg.NumPartitions))
	js := TopicBrokerJSON(t.cfg.NumPartitions, role)
	set := func(slot **EphemeralNode, want bool, path string, data []byte) error {
		switch {
		case want && *slot == nil:
			n, err := c.ephemeral(path, data, r.node)
			if err != nil {
				return err
			}
			*slot = n
		case want:
			if err := (*slot).setAsync(data); err != nil {
				return err
			}
		case *slot != nil:
			(*slot).removeAsync()
			*slot = nil
		}
		return nil
	}
	if err := set(&t.plain, true, p.BrokerTopicNode(topic, r.b.ID, r.b.SlaveID), plain); err != nil {
		return err
	}
	if err := set(&t.pub, t.cfg.AcceptPublish, p.TopicPubNode(topic, r.b.ID, r.b.SlaveID), js); err != nil {
		return err
	}
	return set(&t.sub, t.cfg.AcceptSubscribe, p.TopicSubNode(topic, r.b.ID, r.b.SlaveID), js)
}

// WaitTopic blocks until topic's nodes are registered in the current session.
func (r *BrokerRegistry) WaitTopic(ctx context.Context, topic string) error {
	r.mu.Lock()
	t := r.topics[topic]
	if t == nil {
		r.mu.Unlock()
		return fmt.Errorf("zkmeta: topic %s is not registered", topic)
	}
	if r.node == nil {
		r.mu.Unlock()
		return errors.New("zkmeta: broker registry not started")
	}
	nodes := append([]*EphemeralNode{r.node}, t.nodes()...)
	r.mu.Unlock()
	for _, n := range nodes {
		if err := n.Wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Topics lists the registered topics, sorted.
func (r *BrokerRegistry) Topics() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.topics))
	for t := range r.topics {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// Topic returns topic's registered configuration.
func (r *BrokerRegistry) Topic(topic string) (TopicConfig, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.topics[topic]
	if !ok {
		return TopicConfig{}, false
	}
	return t.cfg, true
}

// UnregisterTopic deletes topic's nodes and forgets it.
func (r *BrokerRegistry) UnregisterTopic(ctx context.Context, topic string) error {
	r.mu.Lock()
	t := r.topics[topic]
	delete(r.topics, topic)
	r.mu.Unlock()
	if t == nil {
		return nil
	}
	var errs []error
	for _, n := range t.nodes() {
		if err := n.Remove(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Unregister deletes every topic node, then the broker node (as MetaQ's shutdown does), and
// waits for ZooKeeper to confirm. The topics stay known: Start registers everything again.
// When ZooKeeper is unreachable until ctx is done, the nodes vanish with the session at Close.
func (r *BrokerRegistry) Unregister(ctx context.Context) error {
	r.mu.Lock()
	node := r.node
	r.node = nil
	var topicNodes []*EphemeralNode
	names := make([]string, 0, len(r.topics))
	for name := range r.topics {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t := r.topics[name]
		topicNodes = append(topicNodes, t.nodes()...)
		t.plain, t.pub, t.sub = nil, nil, nil
	}
	r.mu.Unlock()
	if node == nil {
		return nil
	}
	dels := make([]*deletion, 0, len(topicNodes)+1)
	for _, n := range topicNodes {
		dels = append(dels, n.removeAsync())
	}
	dels = append(dels, node.removeAsync()) // queued last: deleted after the topics
	for _, d := range dels {
		select {
		case <-d.done:
		case <-ctx.Done():
			return ctx.Err()
		case <-r.c.closing:
			return nil
		}
	}
	r.c.log.Printf("zkmeta: unregistered broker %s and %d topic node(s)", r.b, len(topicNodes))
	return nil
}
