package httpapi

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/zkmeta"
)

// cluster gathers what the JSON API and the pages show: brokers, topics and
// groups from ZooKeeper, offsets and figures from each broker's `stats`
// over the text protocol (like any admin client). Broker offsets are cached
// for a second, so a page and its API calls cost one `stats offsets` per
// broker.
type cluster struct {
	zk    *zkmeta.Client
	admin *client.Admin

	mu      sync.Mutex
	offsets map[string]offsetsEntry // broker addr → its partitions' offsets
}

type offsetsEntry struct {
	at  time.Time
	m   map[topicPart]minMax
	err error
}

type topicPart struct {
	topic     string
	partition int
}

type minMax struct{ min, max int64 }

var errNoZK = errors.New("this HTTP side runs without ZooKeeper (zk.zkEnable=false): no cluster view")

func newCluster(zk *zkmeta.Client, cfg client.Config) (*cluster, error) {
	a, err := client.NewAdmin(cfg)
	if err != nil {
		return nil, err
	}
	return &cluster{zk: zk, admin: a, offsets: map[string]offsetsEntry{}}, nil
}

func (c *cluster) close() { _ = c.admin.Close() }

// brokerOffsets returns min/max of every partition of the broker at addr.
func (c *cluster) brokerOffsets(ctx context.Context, addr string) (map[topicPart]minMax, error) {
	c.mu.Lock()
	e, ok := c.offsets[addr]
	c.mu.Unlock()
	if ok && time.Since(e.at) < time.Second {
		return e.m, e.err
	}
	m := map[topicPart]minMax{}
	stats, err := c.admin.Stats(ctx, addr, "offsets")
	for _, s := range stats {
		// "<topic> part <n> min_offset <min> max_offset <max>"
		f := strings.Fields(s.Value)
		if len(f) != 6 || f[0] != "part" {
			continue
		}
		p, err1 := strconv.Atoi(f[1])
		lo, err2 := strconv.ParseInt(f[3], 10, 64)
		hi, err3 := strconv.ParseInt(f[5], 10, 64)
		if err1 == nil && err2 == nil && err3 == nil {
			m[topicPart{s.Key, p}] = minMax{lo, hi}
		}
	}
	c.mu.Lock()
	c.offsets[addr] = offsetsEntry{at: time.Now(), m: m, err: err}
	if len(c.offsets) > 1024 {
		for k, v := range c.offsets {
			if time.Since(v.at) > time.Minute {
				delete(c.offsets, k)
			}
		}
	}
	c.mu.Unlock()
	return m, err
}

// BrokerView is one broker as the cluster page shows it.
type BrokerView struct {
	ID            int               `json:"id"`
	Role          string            `json:"role"`
	Addr          string            `json:"addr"`
	Slaves        map[string]string `json:"slaves,omitempty"`
	Version       string            `json:"version,omitempty"`
	UptimeSeconds int64             `json:"uptimeSeconds"`
	Connections   int64             `json:"connections"`
	Topics        int64             `json:"topics"`
	Messages      int64             `json:"messages"`
	FlushMode     string            `json:"flushMode,omitempty"`
	DiskFree      int64             `json:"diskFreeBytes"`
	DiskTotal     int64             `json:"diskTotalBytes"`
	WriteError    string            `json:"writeError,omitempty"`
	Error         string            `json:"error,omitempty"`
}

// ClusterView is /api/v1/cluster.
type ClusterView struct {
	Brokers   []BrokerView `json:"brokers"`
	ZooKeeper string       `json:"zookeeper"`
	ZKState   string       `json:"zookeeperState"`
	Time      time.Time    `json:"time"`
}

func (c *cluster) clusterView(ctx context.Context) (*ClusterView, error) {
	if c.zk == nil {
		return nil, errNoZK
	}
	bs, err := c.zk.Brokers(ctx)
	if err != nil {
		return nil, err
	}
	v := &ClusterView{Brokers: make([]BrokerView, len(bs)), ZooKeeper: strings.Join(c.zk.Servers(), ",") + c.zk.Chroot(),
		ZKState: c.zk.State().String(), Time: time.Now().UTC()}
	var wg sync.WaitGroup
	for i, b := range bs {
		bv := &v.Brokers[i]
		bv.ID, bv.Role, bv.Addr = b.ID, "master", b.Master
		if b.Master == "" {
			bv.Role = "slave only"
			bv.Addr = client.FetchAddr(b)
		}
		for sid, a := range b.Slaves {
			if bv.Slaves == nil {
				bv.Slaves = map[string]string{}
			}
			bv.Slaves["slave"+strconv.Itoa(sid)] = a
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			fillBroker(ctx, c.admin, bv)
		}()
	}
	wg.Wait()
	return v, nil
}

func fillBroker(ctx context.Context, a *client.Admin, bv *BrokerView) {
	stats, err := a.Stats(ctx, bv.Addr, "")
	if err != nil {
		bv.Error = err.Error()
		return
	}
	for _, s := range stats {
		n, _ := strconv.ParseInt(s.Value, 10, 64)
		switch s.Key {
		case "version":
			bv.Version = s.Value
		case "uptime":
			bv.UptimeSeconds = n
		case "curr_connections":
			bv.Connections = n
		case "topics":
			bv.Topics = n
		case "total_messages":
			bv.Messages = n
		case "flush_mode":
			bv.FlushMode = s.Value
		case "disk_free":
			bv.DiskFree = n
		case "disk_total":
			bv.DiskTotal = n
		case "write_error":
			bv.WriteError = s.Value
		}
	}
}

// PartitionView is one partition of a topic.
type PartitionView struct {
	Broker    int    `json:"broker"`
	Partition int    `json:"partition"`
	Name      string `json:"name"` // "<brokerId>-<partition>", as in ZooKeeper
	Addr      string `json:"addr"`
	Min       int64  `json:"minOffset"`
	Max       int64  `json:"maxOffset"`
	Messages  int64  `json:"messages"`
	Error     string `json:"error,omitempty"`
}

// TopicSummary is one row of /api/v1/topics.
type TopicSummary struct {
	Topic      string    `json:"topic"`
	Brokers    []int     `json:"brokers"`
	Partitions int       `json:"partitions"`
	Messages   int64     `json:"messages"`
	MaxOffsets int64     `json:"maxOffsetSum"`
	Rate       float64   `json:"ratePerSecond"` // messages in per second, over the last sample interval
	History    []float64 `json:"rateHistory"`   // rate per sample, oldest first
	Error      string    `json:"error,omitempty"`
}

// TopicView is /api/v1/topics/{topic}.
type TopicView struct {
	TopicSummary
	PartitionList []PartitionView    `json:"partitionList"`
	Groups        []GroupTopicLagRow `json:"groups"`
	Config        *TopicConfigView   `json:"config,omitempty"`
}

// GroupTopicLagRow is a group's total lag on one topic.
type GroupTopicLagRow struct {
	Group   string `json:"group"`
	Lag     int64  `json:"lag"`
	Members int    `json:"members"`
}

// TopicConfigView is the online configuration of a topic (/meta/config/topics).
type TopicConfigView struct {
	Raw string `json:"raw"`
}

func (c *cluster) topicPartitions(ctx context.Context, topic string) ([]PartitionView, []int, error) {
	tp, err := c.zk.Partitions(ctx, topic, zkmeta.Subscribe)
	if err != nil {
		return nil, nil, err
	}
	var out []PartitionView
	seen := map[int]bool{}
	var brokers []int
	for _, p := range tp.Partitions {
		addr := client.FetchAddr(tp.Brokers[p.BrokerID])
		pv := PartitionView{Broker: p.BrokerID, Partition: p.Partition, Name: p.String(), Addr: addr}
		if !seen[p.BrokerID] {
			seen[p.BrokerID] = true
			brokers = append(brokers, p.BrokerID)
		}
		if addr == "" {
			pv.Error = "no broker registered"
		} else if offs, err := c.brokerOffsets(ctx, addr); err != nil {
			pv.Error = err.Error()
		} else if mm, ok := offs[topicPart{topic, p.Partition}]; ok {
			pv.Min, pv.Max, pv.Messages = mm.min, mm.max, mm.max-mm.min
		}
		out = append(out, pv)
	}
	return out, brokers, nil
}

func (c *cluster) topicSummaries(ctx context.Context) ([]TopicSummary, error) {
	if c.zk == nil {
		return nil, errNoZK
	}
	names, err := c.zk.Topics(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]TopicSummary, 0, len(names))
	for _, t := range names {
		if strings.HasPrefix(t, "%") {
			continue // system topics
		}
		ts := TopicSummary{Topic: t}
		parts, brokers, err := c.topicPartitions(ctx, t)
		if err != nil {
			ts.Error = err.Error()
		}
		ts.Brokers, ts.Partitions = brokers, len(parts)
		for _, p := range parts {
			ts.Messages += p.Messages
			ts.MaxOffsets += p.Max
			if p.Error != "" && ts.Error == "" {
				ts.Error = p.Error
			}
		}
		out = append(out, ts)
	}
	return out, nil
}

// MemberView is a registered consumer.
type MemberView struct {
	ID     string   `json:"id"`
	Topics []string `json:"topics"`
	Owns   int      `json:"owns"`
}

// GroupPartitionView is one partition of a group's topics.
type GroupPartitionView struct {
	Topic     string `json:"topic"`
	Name      string `json:"partition"` // "<brokerId>-<partition>"
	Broker    int    `json:"broker"`
	Partition int    `json:"partitionNumber"`
	Owner     string `json:"owner,omitempty"`
	Committed *int64 `json:"committed,omitempty"`
	Max       int64  `json:"maxOffset"`
	Lag       int64  `json:"lag"`
	Error     string `json:"error,omitempty"`
}

// GroupView is /api/v1/groups/{group}.
type GroupView struct {
	Group      string               `json:"group"`
	Members    []MemberView         `json:"members"`
	Topics     []string             `json:"topics"`
	Partitions []GroupPartitionView `json:"partitions"`
	Lag        int64                `json:"lag"`
	History    []float64            `json:"lagHistory"`
}

// GroupSummary is one row of /api/v1/groups.
type GroupSummary struct {
	Group   string   `json:"group"`
	Members int      `json:"members"`
	Topics  []string `json:"topics"`
	Lag     int64    `json:"lag"`
	Error   string   `json:"error,omitempty"`
}

func (c *cluster) groupView(ctx context.Context, group string) (*GroupView, error) {
	if c.zk == nil {
		return nil, errNoZK
	}
	gi, err := c.zk.DescribeGroup(ctx, group)
	if err != nil {
		return nil, err
	}
	gv := &GroupView{Group: group, Members: []MemberView{}, Partitions: []GroupPartitionView{}, Topics: []string{}}
	owns := map[string]int{}
	owner := map[string]string{} // topic/b-p → owner
	for _, o := range gi.Owners {
		owner[o.Topic+"/"+o.Partition.String()] = o.Owner
		owns[o.Owner]++
	}
	topics := map[string]bool{}
	for _, m := range gi.Consumers {
		gv.Members = append(gv.Members, MemberView{ID: m.Node, Topics: m.Topics, Owns: owns[m.Node] + owns[m.ID]})
		for _, t := range m.Topics {
			topics[t] = true
		}
	}
	committed := map[string]int64{}
	for _, o := range gi.Offsets {
		committed[o.Topic+"/"+o.Partition.String()] = o.Offset.Offset
		topics[o.Topic] = true
	}
	for _, o := range gi.Owners {
		topics[o.Topic] = true
	}
	for t := range topics {
		gv.Topics = append(gv.Topics, t)
	}
	sort.Strings(gv.Topics)
	for _, t := range gv.Topics {
		parts, _, err := c.topicPartitions(ctx, t)
		if err != nil {
			gv.Partitions = append(gv.Partitions, GroupPartitionView{Topic: t, Error: err.Error()})
			continue
		}
		for _, p := range parts {
			key := t + "/" + p.Name
			row := GroupPartitionView{Topic: t, Name: p.Name, Broker: p.Broker, Partition: p.Partition,
				Owner: owner[key], Max: p.Max, Error: p.Error}
			if o, ok := committed[key]; ok {
				row.Committed = &o
				row.Lag = max(0, p.Max-o)
			} else {
				row.Lag = p.Messages // nothing committed: a new group starts per its policy; show what is kept
			}
			gv.Lag += row.Lag
			gv.Partitions = append(gv.Partitions, row)
		}
	}
	return gv, nil
}

func (c *cluster) groupSummaries(ctx context.Context) ([]GroupSummary, error) {
	if c.zk == nil {
		return nil, errNoZK
	}
	groups, err := c.zk.Groups(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]GroupSummary, 0, len(groups))
	for _, g := range groups {
		gs := GroupSummary{Group: g}
		gv, err := c.groupView(ctx, g)
		if err != nil {
			gs.Error = err.Error()
		} else {
			gs.Members, gs.Topics, gs.Lag = len(gv.Members), gv.Topics, gv.Lag
		}
		out = append(out, gs)
	}
	return out, nil
}

// MessageView is a message found by lookup.
type MessageView struct {
	ID         string            `json:"id"` // decimal string: msgIds exceed JavaScript's exact integers
	Topic      string            `json:"topic"`
	Partition  string            `json:"partition"`
	Offset     int64             `json:"offset"`
	StoreTime  time.Time         `json:"storeTime"`
	BornTime   time.Time         `json:"bornTime"`
	Tag        string            `json:"tag,omitempty"`
	Keys       []string          `json:"keys,omitempty"`
	Properties map[string]string `json:"properties,omitempty"`
	Size       int               `json:"size"`
	Text       string            `json:"text"`           // the body as text (invalid UTF-8 replaced), first previewLimit bytes
	Hex        string            `json:"hex"`            // hex dump of the first previewLimit bytes
	JSON       string            `json:"json,omitempty"` // indented, when the body is JSON
	Binary     bool              `json:"binary"`
	Truncated  bool              `json:"truncated"`
}

func messageView(m *client.Message) MessageView {
	v := MessageView{ID: strconv.FormatInt(m.MsgID, 10), Topic: m.Topic, Partition: m.Partition.String(), Offset: m.Offset,
		StoreTime: m.StoreTime.UTC(), BornTime: m.BornTime.UTC(), Tag: m.Tag, Keys: m.Keys, Properties: m.Properties, Size: len(m.Body)}
	v.Text, v.Hex, v.JSON, v.Binary, v.Truncated = preview(m.Body)
	return v
}

// Lookup is what /api/v1/messages finds.
type Lookup struct {
	Messages []MessageView `json:"messages"`
	Errors   []string      `json:"errors,omitempty"`
}

const maxLookup = 50

// lookupID finds one message by id (the id names its broker).
func (c *cluster) lookupID(ctx context.Context, id int64) (*Lookup, error) {
	bid, _ := protocol.SplitMsgID(id)
	addr, err := c.brokerAddr(ctx, bid)
	if err != nil {
		return nil, err
	}
	m, err := c.admin.QueryID(ctx, addr, id)
	if err != nil {
		var be *client.BrokerError
		if errors.As(err, &be) && be.Code == protocol.StatusNotFound {
			return &Lookup{Messages: []MessageView{}}, nil
		}
		return nil, err
	}
	return &Lookup{Messages: []MessageView{messageView(m)}}, nil
}

func (c *cluster) brokerAddr(ctx context.Context, id int) (string, error) {
	if c.zk == nil {
		return "", errNoZK
	}
	bs, err := c.zk.Brokers(ctx)
	if err != nil {
		return "", err
	}
	for _, b := range bs {
		if b.ID == id {
			if a := client.FetchAddr(b); a != "" {
				return a, nil
			}
		}
	}
	return "", fmt.Errorf("broker %d is not registered in ZooKeeper", id)
}

// lookupKey asks every broker serving topic for messages with key.
func (c *cluster) lookupKey(ctx context.Context, topic, key string) (*Lookup, error) {
	parts, _, err := c.topicPartitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	l := &Lookup{Messages: []MessageView{}}
	seen := map[string]bool{}
	for _, p := range parts {
		if seen[p.Addr] || p.Addr == "" {
			continue
		}
		seen[p.Addr] = true
		msgs, err := c.admin.QueryKey(ctx, p.Addr, topic, key, maxLookup)
		if err != nil {
			l.Errors = append(l.Errors, p.Addr+": "+err.Error())
			continue
		}
		for i := range msgs {
			if len(l.Messages) < maxLookup {
				l.Messages = append(l.Messages, messageView(&msgs[i]))
			}
		}
	}
	return l, nil
}

// lookupTime returns, per partition (or the one named "b-p"), the first
// messages stored at or after t.
func (c *cluster) lookupTime(ctx context.Context, topic, partition string, t time.Time, count int) (*Lookup, error) {
	parts, _, err := c.topicPartitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	if count <= 0 || count > maxLookup {
		count = 10
	}
	l := &Lookup{Messages: []MessageView{}}
	for _, p := range parts {
		if partition != "" && p.Name != partition {
			continue
		}
		if p.Addr == "" {
			continue
		}
		off, err := c.admin.OffsetForTime(ctx, p.Addr, topic, p.Partition, t)
		if err != nil {
			l.Errors = append(l.Errors, p.Name+": "+err.Error())
			continue
		}
		res, err := c.admin.Fetch(ctx, p.Addr, topic, p.Partition, off, 256<<10)
		if err != nil {
			l.Errors = append(l.Errors, p.Name+": "+err.Error())
			continue
		}
		for i := range res.Messages {
			if i >= count || len(l.Messages) >= maxLookup {
				break
			}
			res.Messages[i].Partition.BrokerID = p.Broker
			l.Messages = append(l.Messages, messageView(&res.Messages[i]))
		}
	}
	sort.SliceStable(l.Messages, func(i, j int) bool { return l.Messages[i].StoreTime.Before(l.Messages[j].StoreTime) })
	return l, nil
}
