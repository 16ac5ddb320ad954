package cli

import (
	"context"
	"log/slog"
	"math"
	"math/rand/v2"

	"github.com/metaqgo/metaq/client"
)

// sender sends the messages of a `metaq produce` run with a client.Producer: through the
// producer's partition selection (SendAsync, up to --window in flight), or to the --partition
// one (SendToPartition).
type sender struct {
	p      *client.Producer
	target *client.Partition // nil: the producer picks
}

// send calls cb with the result, at once or later from a connection goroutine.
func (s *sender) send(ctx context.Context, m *client.Message, cb func(client.SendResult, error)) {
	if s.target == nil {
		s.p.SendAsync(ctx, m, cb)
		return
	}
	cb(s.p.SendToPartition(ctx, m, *s.target))
}

// newSender creates the producer of a run:
//   - --broker: the client's direct mode (Config.Brokers, no ZooKeeper); the broker picks the
//     partition unless --partition names it;
//   - a topic registered in ZooKeeper: the producer reads (and watches) its publish
//     partitions and goes round them from a random one;
//   - a topic not registered yet (a wildcard [topic=…] section registers it on its first put):
//     direct mode over the registered masters, in random order; the broker picks the partition.
func (a *App) newSender(ctx context.Context, o *produceOpts) (*sender, error) {
	ps, err := parsePartitionSpec(o.partition)
	if err != nil {
		return nil, err
	}
	cfg := a.clientConfig(slog.LevelError)
	cfg.MaxInFlight = o.window
	cfg.Trace = o.trace
	cfg.Producer = client.ProducerOptions{
		Selector:       shiftedSelector{client.RoundRobin(), rand.IntN(1 << 20)},
		SendTimeout:    a.ConnectTimeout,
		MaxMessageSize: math.MaxInt32, // the broker's maxMessageSize decides
	}
	s := &sender{}
	switch {
	case o.broker != "":
		if ps.Set && ps.BrokerID >= 0 {
			return nil, usageErr("with --broker, --partition is the broker's partition number, not %s", ps)
		}
		cfg.ZKConnect, cfg.Brokers = "", []string{o.broker}
		if ps.Set {
			s.target = &client.Partition{BrokerID: -1, Partition: ps.Partition}
		}
	default:
		tp, err := a.topicPartitions(ctx, o.topic, true)
		if err != nil {
			return nil, err
		}
		if len(tp.Partitions) == 0 {
			if err := a.toUnregisteredTopic(ctx, o.topic, ps, &cfg, s); err != nil {
				return nil, err
			}
			break
		}
		if ps.Set {
			p, err := ps.resolve(o.topic, tp.Partitions)
			if err != nil {
				return nil, err
			}
			s.target = &p
		}
	}
	if s.p, err = client.NewProducer(cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// toUnregisteredTopic sets cfg up to send a topic nothing publishes yet to the registered
// masters (the ones --partition names) without ZooKeeper.
func (a *App) toUnregisteredTopic(ctx context.Context, topic string, ps partitionSpec, cfg *client.Config, s *sender) error {
	bs, err := a.brokerList(ctx)
	if err != nil {
		return err
	}
	var addrs []string
	masters := 0
	for _, b := range bs {
		if b.Master == "" {
			continue
		}
		masters++
		if !ps.Set || ps.BrokerID < 0 || ps.BrokerID == b.ID {
			addrs = append(addrs, b.Master)
		}
	}
	switch {
	case masters == 0:
		return unavailableErr("no broker registered in ZooKeeper %s (root %s); start one (scripts/broker.sh start) or use --broker", a.ZK, a.ZKRoot)
	case !ps.Set:
	case ps.BrokerID < 0 && masters > 1:
		return usageErr("topic %s is not registered yet; write --partition <brokerId>-<partition>", topic)
	case len(addrs) == 0:
		return notFoundErr("broker %d is not registered", ps.BrokerID)
	default:
		s.target = &client.Partition{BrokerID: ps.BrokerID, Partition: ps.Partition}
	}
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	cfg.ZKConnect, cfg.Brokers = "", addrs
	a.logf("topic %s is not registered in ZooKeeper yet; sending to %d broker(s), the broker picks the partition", topic, len(addrs))
	return nil
}

// shiftedSelector starts a selector's choices at another partition: runs of a few messages
// from the command line spread over the partitions instead of all landing in the first.
type shiftedSelector struct {
	client.PartitionSelector
	by int
}

func (s shiftedSelector) Select(m *client.Message, parts []client.Partition) int {
	return (s.PartitionSelector.Select(m, parts) + s.by) % len(parts)
}
