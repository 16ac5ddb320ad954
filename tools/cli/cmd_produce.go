package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/zkmeta"
)

type produceOpts struct {
	topic     string
	messages  []string
	file      string
	whole     bool
	tag       string
	keys      []string
	partition string
	count     int
	window    int
	quiet     bool
	broker    string
}

type sentRow struct {
	MsgID     int64  `json:"msgId"`
	Topic     string `json:"topic"`
	BrokerID  int    `json:"brokerId"`
	Partition int    `json:"partition"`
	Offset    int64  `json:"offset"`
}

func newProduceCommand(app *App) *cobra.Command {
	var o produceOpts
	cmd := &cobra.Command{
		Use:   "produce --topic <topic> [--message <text>]... [--file <path>]",
		Short: "Send messages: from --message, a file, or stdin (one message per line)",
		Long: `Send messages to a topic. The messages come from --message (repeatable), else from --file
(one message per line; "-" is stdin), else from stdin, one per line. --whole sends the whole
file or stdin as one message. --count repeats every message.

The topic's partitions are read from ZooKeeper and used round-robin (or --partition); a topic
no producer has used yet (accepted by a wildcard [topic=…] section) is sent to a registered
broker, which picks the partition. --broker host:port talks to one broker directly, without
ZooKeeper (standalone brokers, zk.zkEnable=false).

For every message it prints "<msgId> <brokerId>-<partition> <offset>" (JSON lines with --json);
--quiet prints only a summary. On a terminal, a progress line shows the count and the rate.`,
		Example: `  metaq produce --topic test --message hello
  metaq produce -t orders -m '{"id":42}' --tag paid --key o-42
  seq 1000 | metaq produce -t test --quiet
  metaq produce -t test -m ping --count 100000 --quiet
  metaq produce -t test --file payload.bin --whole --broker 127.0.0.1:8123`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return app.produce(cmd, &o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.topic, "topic", "t", "", "topic (required)")
	f.StringArrayVarP(&o.messages, "message", "m", nil, "message body (repeatable)")
	f.StringVar(&o.file, "file", "", `read messages from this file, one per line ("-" = stdin)`)
	f.BoolVar(&o.whole, "whole", false, "send the whole file / stdin as one message")
	f.StringVar(&o.tag, "tag", "", "tag of the messages (consumers filter on it)")
	f.StringArrayVarP(&o.keys, "key", "k", nil, "message key, for `metaq query key` (repeatable)")
	f.StringVarP(&o.partition, "partition", "p", "", "send to this partition: <brokerId>-<partition>, or <partition> when one broker serves the topic")
	f.IntVarP(&o.count, "count", "n", 1, "send every message this many times")
	f.IntVar(&o.window, "window", 128, "most puts in flight")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "print only a summary")
	f.StringVar(&o.broker, "broker", "", "send to this broker (host:port) directly, without ZooKeeper")
	_ = cmd.MarkFlagRequired("topic")
	return cmd
}

// messageProps builds the properties line of a message (tag, keys).
func messageProps(tag string, keys []string) (string, error) {
	var parts []string
	esc := func(s string) string { return strings.ReplaceAll(url.QueryEscape(s), "+", "%20") }
	if tag != "" {
		parts = append(parts, "tag="+esc(tag))
	}
	if len(keys) > 0 {
		for _, k := range keys {
			if k == "" || strings.ContainsAny(k, " \t\r\n") {
				return "", usageErr("bad --key %q: keys are single words", k)
			}
		}
		parts = append(parts, "keys="+esc(strings.Join(keys, " ")))
	}
	return strings.Join(parts, "&"), nil
}

// route picks the broker and partition of every message.
type route struct {
	addr      string
	brokerID  int
	partition int // -1: the broker picks
}

type router struct {
	routes []route
	next   int
}

func (r *router) pick() route {
	rt := r.routes[r.next%len(r.routes)]
	r.next++
	return rt
}

func (a *App) produceRouter(ctx context.Context, o *produceOpts) (*router, error) {
	ps, err := parsePartitionSpec(o.partition)
	if err != nil {
		return nil, err
	}
	if o.broker != "" {
		rt := route{addr: o.broker, brokerID: -1, partition: -1}
		if ps.Set {
			if ps.BrokerID >= 0 {
				return nil, usageErr("with --broker, --partition is the broker's partition number, not %s", ps)
			}
			rt.partition = ps.Partition
		}
		return &router{routes: []route{rt}}, nil
	}
	tp, err := a.topicPartitions(ctx, o.topic, true)
	if err != nil {
		return nil, err
	}
	if len(tp.Partitions) > 0 {
		parts := tp.Partitions
		if ps.Set {
			p, err := ps.resolve(o.topic, parts)
			if err != nil {
				return nil, err
			}
			parts = []zkmeta.Partition{p}
		}
		r := &router{next: rand.IntN(len(parts))}
		for _, p := range parts {
			r.routes = append(r.routes, route{addr: tp.Brokers[p.BrokerID].Master, brokerID: p.BrokerID, partition: p.Partition})
		}
		return r, nil
	}
	// Not registered yet: a wildcard topic registers on its first put. Let a broker pick.
	zc, err := a.zkClient(ctx)
	if err != nil {
		return nil, err
	}
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	bs, err := zc.Brokers(octx)
	if err != nil {
		return nil, zkErr(err)
	}
	r := &router{}
	for _, b := range bs {
		if b.Master != "" {
			r.routes = append(r.routes, route{addr: b.Master, brokerID: b.ID, partition: -1})
		}
	}
	if len(r.routes) == 0 {
		return nil, unavailableErr("no broker registered in ZooKeeper %s (root %s); start one (scripts/broker.sh start) or use --broker", a.ZK, a.ZKRoot)
	}
	if ps.Set {
		if ps.BrokerID < 0 && len(r.routes) > 1 {
			return nil, usageErr("topic %s is not registered yet; write --partition <brokerId>-<partition>", o.topic)
		}
		var picked []route
		for _, rt := range r.routes {
			if ps.BrokerID < 0 || rt.brokerID == ps.BrokerID {
				rt.partition = ps.Partition
				picked = append(picked, rt)
			}
		}
		if len(picked) == 0 {
			return nil, notFoundErr("broker %d is not registered", ps.BrokerID)
		}
		r.routes = picked
	}
	a.logf("topic %s is not registered in ZooKeeper yet; sending to %d broker(s), the broker picks the partition", o.topic, len(r.routes))
	r.next = rand.IntN(len(r.routes))
	return r, nil
}

// messageSource yields message bodies.
type messageSource func() ([]byte, error) // io.EOF at the end

func (a *App) produceSource(o *produceOpts) (messageSource, func(), error) {
	if len(o.messages) > 0 {
		if o.file != "" {
			return nil, nil, usageErr("use either --message or --file")
		}
		i := 0
		return func() ([]byte, error) {
			if i >= len(o.messages) {
				return nil, io.EOF
			}
			i++
			return []byte(o.messages[i-1]), nil
		}, func() {}, nil
	}
	var r io.Reader = a.Stdin
	closeFn := func() {}
	if (o.file == "" || o.file == "-") && isTerminal(a.Stdin) {
		fmt.Fprintln(a.Stderr, "metaq: reading messages from the terminal, one per line; end with Ctrl-D")
	}
	if o.file != "" && o.file != "-" {
		f, err := os.Open(o.file)
		if err != nil {
			return nil, nil, usageErr("--file: %v", err)
		}
		r, closeFn = f, func() { f.Close() }
	}
	if r == nil {
		return nil, nil, usageErr("nothing to send: give --message, --file or stdin")
	}
	if o.whole {
		done := false
		return func() ([]byte, error) {
			if done {
				return nil, io.EOF
			}
			done = true
			return io.ReadAll(r)
		}, closeFn, nil
	}
	br := bufio.NewReaderSize(r, 64<<10)
	return func() ([]byte, error) {
		line, err := br.ReadBytes('\n')
		if len(line) == 0 && err != nil {
			return nil, err
		}
		line = []byte(strings.TrimRight(string(line), "\r\n"))
		return line, nil
	}, closeFn, nil
}

type inflight struct {
	ch   <-chan wireResult
	conn *brokerConn
	rt   route
}

func (a *App) produce(cmd *cobra.Command, o *produceOpts) error {
	if o.count < 1 {
		return usageErr("--count must be >= 1")
	}
	if o.window < 1 {
		return usageErr("--window must be >= 1")
	}
	if !protocol.ValidName(o.topic) {
		return usageErr("bad topic name %q: 1-255 characters of A-Z a-z 0-9 _ . %% -", o.topic)
	}
	props, err := messageProps(o.tag, o.keys)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	src, closeSrc, err := a.produceSource(o)
	if err != nil {
		return err
	}
	defer closeSrc()
	r, err := a.produceRouter(ctx, o)
	if err != nil {
		return err
	}
	prog := a.newProgress("produce "+o.topic+":", o.quiet)
	defer prog.finish()

	start := time.Now()
	var sent int64
	var queue []inflight
	out := bufio.NewWriter(a.Stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	var firstErr error

	// complete waits for the oldest put and prints its result.
	complete := func() {
		f := queue[0]
		queue = queue[1:]
		var res wireResult
		select {
		case res = <-f.ch:
		case <-ctx.Done():
			res = wireResult{err: ctx.Err()}
		}
		pr, err := f.conn.putReply(res)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			return
		}
		sent++
		prog.add(1)
		if o.quiet {
			return
		}
		brokerID := f.rt.brokerID
		if brokerID < 0 {
			brokerID, _ = protocol.SplitMsgID(pr.MsgID)
		}
		if a.JSON {
			_ = enc.Encode(sentRow{MsgID: pr.MsgID, Topic: o.topic, BrokerID: brokerID, Partition: pr.Partition, Offset: pr.Offset})
		} else {
			fmt.Fprintf(out, "%d %d-%d %d\n", pr.MsgID, brokerID, pr.Partition, pr.Offset)
		}
		if len(queue) == 0 {
			_ = out.Flush()
		}
	}

	var data []byte
	var flag int32
	// Read on a goroutine, so that Ctrl-C ends the command even while it waits for a line.
	type item struct {
		body []byte
		err  error
	}
	items := make(chan item, 1024)
	readerDone := make(chan struct{})
	defer close(readerDone)
	go func() {
		for {
			b, err := src()
			select {
			case items <- item{b, err}:
			case <-readerDone:
				return
			}
			if err != nil {
				return
			}
		}
	}()
loop:
	for {
		var it item
		select {
		case it = <-items:
		case <-ctx.Done():
			break loop
		default:
			// No input ready (a terminal, a slow pipe): finish what is in flight and show
			// it before waiting for more.
			for len(queue) > 0 {
				complete()
			}
			_ = out.Flush()
			select {
			case it = <-items:
			case <-ctx.Done():
				break loop
			}
		}
		body, err := it.body, it.err
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("reading messages: %w", err)
		}
		data, flag = protocol.AppendMessageData(data[:0], 0, []byte(props), nil, false, body)
		for range o.count {
			if firstErr != nil || ctx.Err() != nil {
				break loop
			}
			rt := r.pick()
			c, err := a.broker(ctx, rt.addr)
			if err != nil {
				firstErr = err
				break loop
			}
			ch, err := c.sendPut(o.topic, rt.partition, flag, data)
			if err != nil {
				firstErr = err
				break loop
			}
			queue = append(queue, inflight{ch: ch, conn: c, rt: rt})
			for len(queue) >= o.window {
				complete()
			}
		}
	}
	for len(queue) > 0 {
		complete()
	}
	prog.finish()
	if o.quiet {
		el := time.Since(start)
		if a.JSON {
			_ = enc.Encode(map[string]any{"topic": o.topic, "sent": sent, "seconds": el.Seconds()})
		} else {
			fmt.Fprintf(out, "sent %d message(s) to %s in %s (%.0f msg/s)\n", sent, o.topic, el.Round(time.Millisecond), float64(sent)/max(el.Seconds(), 1e-9))
		}
	}
	if firstErr != nil {
		_ = out.Flush()
		if errors.Is(firstErr, context.Canceled) {
			a.warnf("interrupted after %d message(s)", sent)
			return silentExit{code: ExitInterrupted}
		}
		return fmt.Errorf("after %d message(s): %w", sent, firstErr)
	}
	if ctx.Err() != nil {
		a.warnf("interrupted after %d message(s)", sent)
		return silentExit{code: ExitInterrupted}
	}
	if sent == 0 {
		a.warnf("nothing sent: the input had no message")
	}
	return nil
}
