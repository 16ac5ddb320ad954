package zkmeta

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// DefaultRoot is MetaQ's default zk.zkRoot.
const DefaultRoot = "/meta"

// MasterSlaveID is the slave id of a master broker (MetaQ's slaveId = -1).
const MasterSlaveID = -1

// Paths builds every ZooKeeper path of the metaq layout (docs/zookeeper.md) below one root (zk.zkRoot).
// Paths are relative to the client's chroot, if any. The zero value uses the root "/" (no
// prefix); use NewPaths to apply MetaQ's default "/meta".
type Paths struct {
	root string // "" (= "/") or "/a/b", never a trailing slash
}

// NewPaths normalizes root like MetaQ does: a leading "/" is added, a trailing "/" dropped;
// "" means DefaultRoot and "/" means the top of the tree.
func NewPaths(root string) Paths {
	root = strings.TrimSpace(root)
	if root == "" {
		root = DefaultRoot
	}
	root = "/" + strings.Trim(root, "/")
	if root == "/" {
		root = ""
	}
	return Paths{root: root}
}

// Root is the normalized root ("/meta"; "/" for the top of the tree).
func (p Paths) Root() string {
	if p.root == "" {
		return "/"
	}
	return p.root
}

// Brokers is <root>/brokers.
func (p Paths) Brokers() string { return p.root + "/brokers" }

// BrokerIDs is <root>/brokers/ids, the parent of every broker id.
func (p Paths) BrokerIDs() string { return p.root + "/brokers/ids" }

// BrokerIDDir is <root>/brokers/ids/<id> (persistent; holds master and slave<n>).
func (p Paths) BrokerIDDir(id int) string { return p.BrokerIDs() + "/" + strconv.Itoa(id) }

// BrokerMaster is <root>/brokers/ids/<id>/master (ephemeral, data meta://host:port).
func (p Paths) BrokerMaster(id int) string { return p.BrokerIDDir(id) + "/master" }

// BrokerSlave is <root>/brokers/ids/<id>/slave<n> (ephemeral, data meta://host:port).
func (p Paths) BrokerSlave(id, slaveID int) string {
	return p.BrokerIDDir(id) + "/slave" + strconv.Itoa(slaveID)
}

// BrokerNode is BrokerMaster for slaveID < 0, else BrokerSlave.
func (p Paths) BrokerNode(id, slaveID int) string {
	if slaveID < 0 {
		return p.BrokerMaster(id)
	}
	return p.BrokerSlave(id, slaveID)
}

// BrokerTopics is <root>/brokers/topics (MetaQ before 1.4.3: data = partition count).
func (p Paths) BrokerTopics() string { return p.root + "/brokers/topics" }

// TopicsPub is <root>/brokers/topics-pub (topics accepting puts).
func (p Paths) TopicsPub() string { return p.root + "/brokers/topics-pub" }

// TopicsSub is <root>/brokers/topics-sub (topics accepting gets).
func (p Paths) TopicsSub() string { return p.root + "/brokers/topics-sub" }

// BrokerTopic is <root>/brokers/topics/<topic>.
func (p Paths) BrokerTopic(topic string) string { return p.BrokerTopics() + "/" + topic }

// TopicPub is <root>/brokers/topics-pub/<topic>.
func (p Paths) TopicPub(topic string) string { return p.TopicsPub() + "/" + topic }

// TopicSub is <root>/brokers/topics-sub/<topic>.
func (p Paths) TopicSub(topic string) string { return p.TopicsSub() + "/" + topic }

// BrokerTopicNode is <root>/brokers/topics/<topic>/<id>-m (or -s<n>); data = partition count.
func (p Paths) BrokerTopicNode(topic string, id, slaveID int) string {
	return p.BrokerTopic(topic) + "/" + BrokerRole(id, slaveID)
}

// TopicPubNode is <root>/brokers/topics-pub/<topic>/<id>-m; data = TopicBrokerJSON.
func (p Paths) TopicPubNode(topic string, id, slaveID int) string {
	return p.TopicPub(topic) + "/" + BrokerRole(id, slaveID)
}

// TopicSubNode is <root>/brokers/topics-sub/<topic>/<id>-m (or -s<n>); data = TopicBrokerJSON.
func (p Paths) TopicSubNode(topic string, id, slaveID int) string {
	return p.TopicSub(topic) + "/" + BrokerRole(id, slaveID)
}

// Consumers is <root>/consumers.
func (p Paths) Consumers() string { return p.root + "/consumers" }

// Group is <root>/consumers/<group>.
func (p Paths) Group(group string) string { return p.Consumers() + "/" + group }

// GroupIDs is <root>/consumers/<group>/ids (the group's registered consumers).
func (p Paths) GroupIDs(group string) string { return p.Group(group) + "/ids" }

// ConsumerNode is <root>/consumers/<group>/ids/<group>_<consumerID> (ephemeral; data = topics
// joined by ',').
func (p Paths) ConsumerNode(group, consumerID string) string {
	return p.GroupIDs(group) + "/" + ConsumerNodeName(group, consumerID)
}

// GroupOwners is <root>/consumers/<group>/owners.
func (p Paths) GroupOwners(group string) string { return p.Group(group) + "/owners" }

// GroupOffsets is <root>/consumers/<group>/offsets.
func (p Paths) GroupOffsets(group string) string { return p.Group(group) + "/offsets" }

// Owners is <root>/consumers/<group>/owners/<topic>.
func (p Paths) Owners(group, topic string) string { return p.Group(group) + "/owners/" + topic }

// Owner is <root>/consumers/<group>/owners/<topic>/<brokerId>-<partition> (ephemeral; data = the
// owning consumer's id string).
func (p Paths) Owner(group, topic string, part Partition) string {
	return p.Owners(group, topic) + "/" + part.String()
}

// Offsets is <root>/consumers/<group>/offsets/<topic>.
func (p Paths) Offsets(group, topic string) string { return p.Group(group) + "/offsets/" + topic }

// Offset is <root>/consumers/<group>/offsets/<topic>/<brokerId>-<partition> (persistent; data =
// <msgId>-<offset>).
func (p Paths) Offset(group, topic string, part Partition) string {
	return p.Offsets(group, topic) + "/" + part.String()
}

// ConsumerNodeName is MetaQ's consumer id string: <group>_<consumerID>. It names the node under
// ids/ and is what an owner node holds.
func ConsumerNodeName(group, consumerID string) string { return group + "_" + consumerID }

// BrokerRole names a broker inside the topic directories: "<id>-m" for a master (slaveID < 0),
// "<id>-s<n>" for slave n.
func BrokerRole(id, slaveID int) string {
	if slaveID < 0 {
		return strconv.Itoa(id) + "-m"
	}
	return strconv.Itoa(id) + "-s" + strconv.Itoa(slaveID)
}

// ParseBrokerRole parses "<id>-m" (slaveID = MasterSlaveID) or "<id>-s<n>".
func ParseBrokerRole(s string) (id, slaveID int, err error) {
	idStr, role, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, fmt.Errorf("zkmeta: bad broker role %q (want <id>-m or <id>-s<n>)", s)
	}
	id, err = strconv.Atoi(idStr)
	if err != nil || id < 0 {
		return 0, 0, fmt.Errorf("zkmeta: bad broker id in %q", s)
	}
	switch {
	case role == "m":
		return id, MasterSlaveID, nil
	case strings.HasPrefix(role, "s"):
		n, err := strconv.Atoi(role[1:])
		if err != nil || n < 0 {
			return 0, 0, fmt.Errorf("zkmeta: bad slave id in %q", s)
		}
		return id, n, nil
	}
	return 0, 0, fmt.Errorf("zkmeta: bad broker role %q (want <id>-m or <id>-s<n>)", s)
}

// Partition identifies a partition in the cluster: broker id and partition number. Its string
// form "<brokerId>-<partition>" names owner and offset nodes.
type Partition struct {
	BrokerID  int
	Partition int
}

func (p Partition) String() string {
	return strconv.Itoa(p.BrokerID) + "-" + strconv.Itoa(p.Partition)
}

// Less orders partitions by broker id, then partition (MetaQ's order).
func (p Partition) Less(q Partition) bool {
	if p.BrokerID != q.BrokerID {
		return p.BrokerID < q.BrokerID
	}
	return p.Partition < q.Partition
}

// ParsePartition parses "<brokerId>-<partition>".
func ParsePartition(s string) (Partition, error) {
	b, n, ok := strings.Cut(s, "-")
	if ok {
		id, err1 := strconv.Atoi(b)
		part, err2 := strconv.Atoi(n)
		if err1 == nil && err2 == nil && id >= 0 && part >= 0 {
			return Partition{BrokerID: id, Partition: part}, nil
		}
	}
	return Partition{}, fmt.Errorf("zkmeta: bad partition %q (want <brokerId>-<partition>)", s)
}

// BrokerURI is the data of a broker's master/slave node: "meta://host:port".
func BrokerURI(host string, port int) string {
	return "meta://" + net.JoinHostPort(host, strconv.Itoa(port))
}

// ParseBrokerURI parses "meta://host:port" (MetaQ clients may append "?slaveId=n"; any query is
// ignored) and returns "host:port".
func ParseBrokerURI(s string) (string, error) {
	s = strings.TrimSpace(s)
	rest, ok := strings.CutPrefix(s, "meta://")
	if !ok {
		return "", fmt.Errorf("zkmeta: bad broker address %q (want meta://host:port)", s)
	}
	if i := strings.IndexAny(rest, "?/"); i >= 0 {
		rest = rest[:i]
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil || host == "" {
		return "", fmt.Errorf("zkmeta: bad broker address %q (want meta://host:port)", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return "", fmt.Errorf("zkmeta: bad port in broker address %q", s)
	}
	return rest, nil
}

// TopicBrokerJSON is the data of topics-pub and topics-sub nodes, byte for byte as MetaQ's
// TopicBroker.toJson: {"numParts":N,"broker":"<id>-m"}.
func TopicBrokerJSON(numParts int, role string) []byte {
	// role is produced by BrokerRole ([0-9]+-m|s[0-9]+): nothing to escape.
	return []byte(`{"numParts":` + strconv.Itoa(numParts) + `,"broker":"` + role + `"}`)
}

// ParseTopicBroker reads a topic node's data: MetaQ's JSON {"numParts":N,"broker":"<id>-m"}
// (topics-pub, topics-sub) or a plain decimal partition count (brokers/topics, and MetaQ before
// 1.4.3). role is "" for the plain form.
func ParseTopicBroker(data []byte) (numParts int, role string, err error) {
	d := bytes.TrimSpace(data)
	if len(d) > 0 && d[0] == '{' {
		var tb struct {
			NumParts *int   `json:"numParts"`
			Broker   string `json:"broker"`
		}
		if err := json.Unmarshal(d, &tb); err != nil || tb.NumParts == nil || *tb.NumParts < 0 {
			return 0, "", fmt.Errorf("zkmeta: bad topic broker data %q", data)
		}
		return *tb.NumParts, tb.Broker, nil
	}
	n, err := strconv.Atoi(string(d))
	if err != nil || n < 0 {
		return 0, "", fmt.Errorf("zkmeta: bad topic broker data %q", data)
	}
	return n, "", nil
}

// Offset is a committed consumer position: the next queue offset to consume and the id of the
// last consumed message (-1 when unknown).
type Offset struct {
	MsgID  int64
	Offset int64
}

// String is the node data MetaQ 1.4+ writes: "<msgId>-<offset>".
func (o Offset) String() string {
	return strconv.FormatInt(o.MsgID, 10) + "-" + strconv.FormatInt(o.Offset, 10)
}

// ParseOffset reads an offset node: "<msgId>-<offset>" (MetaQ 1.4+, msgId may be -1) or the legacy
// plain "<offset>" (MsgID = -1).
func ParseOffset(data []byte) (Offset, error) {
	s := strings.TrimSpace(string(data))
	// The separator is the first '-' that is not a leading sign.
	if i := strings.IndexByte(s[min(1, len(s)):], '-'); i >= 0 {
		i++
		msgID, err1 := strconv.ParseInt(s[:i], 10, 64)
		off, err2 := strconv.ParseInt(s[i+1:], 10, 64)
		if err1 != nil || err2 != nil {
			return Offset{}, fmt.Errorf("zkmeta: bad offset %q (want <msgId>-<offset> or <offset>)", data)
		}
		return Offset{MsgID: msgID, Offset: off}, nil
	}
	off, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return Offset{}, fmt.Errorf("zkmeta: bad offset %q (want <msgId>-<offset> or <offset>)", data)
	}
	return Offset{MsgID: -1, Offset: off}, nil
}

// ErrBadName reports a topic or group name that metaq does not accept.
var ErrBadName = errors.New("zkmeta: bad name")

// ValidateName checks a topic or group name: [A-Za-z0-9_.%-]{1,255}, never "." or "..".
func ValidateName(kind, s string) error {
	if s == "" || len(s) > 255 || s == "." || s == ".." {
		return fmt.Errorf("%w: %s %q (want [A-Za-z0-9_.%%-]{1,255}, not . or ..)", ErrBadName, kind, s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '_' || c == '.' || c == '%' || c == '-') {
			return fmt.Errorf("%w: %s %q (want [A-Za-z0-9_.%%-]{1,255}, not . or ..)", ErrBadName, kind, s)
		}
	}
	return nil
}

// validConsumerID: a consumer id becomes part of a node name.
func validConsumerID(s string) error {
	if s == "" || len(s) > 512 || strings.ContainsAny(s, "/\x00") || s == "." || s == ".." {
		return fmt.Errorf("%w: consumer id %q", ErrBadName, s)
	}
	return nil
}

// FormatTopics is a consumer node's data: topics joined by ','.
func FormatTopics(topics []string) []byte { return []byte(strings.Join(topics, ",")) }

// ParseTopics splits a consumer node's data; blank data means no topics.
func ParseTopics(data []byte) []string {
	s := strings.TrimSpace(string(data))
	if s == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	out := parts[:0]
	for _, t := range parts {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
}
