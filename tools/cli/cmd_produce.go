package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/protocol"
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
	delay     produceDelay // produce_delay.go
	trace     bool         // write trace records (docs/trace.md)
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
--quiet prints only a summary. On a terminal, a progress line shows the count and the rate.
An input without any message (an empty file or stdin) sends nothing and exits 1.`,
		Example: `  metaq produce --topic test --message hello
  metaq produce -t orders -m '{"id":42}' --tag paid --key o-42
  seq 1000 | metaq produce -t test --quiet
  metaq produce -t test -m ping --count 100000 --quiet
  metaq produce -t test --file payload.bin --whole --broker 127.0.0.1:8123
  metaq produce -t orders -m reminder --delay 30m
  metaq produce -t orders -m later --deliver-at 2026-12-24T18:00:00+01:00`,
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
	o.delay.flags(f)
	f.BoolVar(&o.trace, "trace", false, "write message-trace records of the sends to %TRACE% (see 'metaq trace')")
	_ = cmd.MarkFlagRequired("topic")
	return cmd
}

// sendResult is a put's outcome, handed from the producer's callback to the printer.
type sendResult struct {
	res client.SendResult
	err error
}

func (o *produceOpts) validate() error {
	if o.count < 1 {
		return usageErr("--count must be >= 1")
	}
	if o.window < 1 {
		return usageErr("--window must be >= 1")
	}
	if !protocol.ValidName(o.topic) {
		return usageErr("bad topic name %q: 1-255 characters of A-Z a-z 0-9 _ . %% -", o.topic)
	}
	for _, k := range o.keys {
		if k == "" || strings.ContainsAny(k, " \t\r\n") {
			return usageErr("bad --key %q: keys are single words", k)
		}
	}
	return o.delay.validate()
}

func (a *App) produce(cmd *cobra.Command, o *produceOpts) error {
	if err := o.validate(); err != nil {
		return err
	}
	ctx := cmd.Context()
	src, closeSrc, err := a.produceSource(o)
	if err != nil {
		return err
	}
	defer closeSrc()
	snd, err := a.newSender(ctx, o)
	if err != nil {
		return err
	}
	defer snd.p.Close()
	r := a.newProduceRun(o, snd)
	defer r.prog.finish()
	defer r.out.Flush()
	items, stopReading := readMessages(src)
	defer stopReading()

	start := time.Now()
	if err := r.sendAll(ctx, items); err != nil {
		return err
	}
	for len(r.queue) > 0 {
		r.complete(ctx)
	}
	r.prog.finish()
	if o.quiet {
		r.summary(time.Since(start))
	}
	return r.outcome(ctx)
}

// produceRun is one `metaq produce`: the puts in flight, in send order, and what was printed.
type produceRun struct {
	app      *App
	o        *produceOpts
	snd      *sender
	prog     *progress
	out      *bufio.Writer
	enc      *json.Encoder
	queue    []chan sendResult // in send order: results are printed in that order
	sent     int64
	firstErr error
}

func (a *App) newProduceRun(o *produceOpts, snd *sender) *produceRun {
	r := &produceRun{app: a, o: o, snd: snd, prog: a.newProgress("produce "+o.topic+":", o.quiet), out: bufio.NewWriter(a.Stdout)}
	r.enc = json.NewEncoder(r.out)
	r.enc.SetEscapeHTML(false)
	return r
}

// readItem is a message body read from the input, or the error that ended it (io.EOF).
type readItem struct {
	body []byte
	err  error
}

// readMessages reads src on a goroutine, so that Ctrl-C ends the command even while it waits
// for a line; stop ends the goroutine.
func readMessages(src messageSource) (items <-chan readItem, stop func()) {
	ch := make(chan readItem, 1024)
	done := make(chan struct{})
	go func() {
		for {
			b, err := src()
			select {
			case ch <- readItem{b, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return ch, func() { close(done) }
}

// next returns the next input item. When none is ready (a terminal, a slow pipe) it first
// finishes what is in flight and shows it. ok is false when ctx ended.
func (r *produceRun) next(ctx context.Context, items <-chan readItem) (it readItem, ok bool) {
	select {
	case it = <-items:
		return it, true
	case <-ctx.Done():
		return it, false
	default:
	}
	for len(r.queue) > 0 {
		r.complete(ctx)
	}
	_ = r.out.Flush()
	select {
	case it = <-items:
		return it, true
	case <-ctx.Done():
		return it, false
	}
}

// sendAll sends every input message --count times, at most --window in flight, until the
// input ends, a put fails or ctx ends. The error is the input's (a put's is r.firstErr).
func (r *produceRun) sendAll(ctx context.Context, items <-chan readItem) error {
	for {
		it, ok := r.next(ctx, items)
		if !ok || errors.Is(it.err, io.EOF) {
			return nil
		}
		if it.err != nil {
			return fmt.Errorf("reading messages: %w", it.err)
		}
		msg := &client.Message{Topic: r.o.topic, Body: it.body, Tag: r.o.tag, Keys: r.o.keys} // never modified: shared by its --count sends
		r.o.delay.apply(msg)
		for range r.o.count {
			if r.firstErr != nil || ctx.Err() != nil {
				return nil
			}
			ch := make(chan sendResult, 1)
			r.snd.send(ctx, msg, func(res client.SendResult, err error) { ch <- sendResult{res, err} })
			r.queue = append(r.queue, ch)
			for len(r.queue) >= r.o.window {
				r.complete(ctx)
			}
		}
	}
}

// complete waits for the oldest put and prints its result.
func (r *produceRun) complete(ctx context.Context) {
	ch := r.queue[0]
	r.queue = r.queue[1:]
	var res sendResult
	select {
	case res = <-ch:
	case <-ctx.Done():
		res.err = ctx.Err()
	}
	if res.err != nil {
		if r.firstErr == nil {
			r.firstErr = res.err
		}
		return
	}
	r.sent++
	r.prog.add(1)
	if r.o.quiet {
		return
	}
	r.printSent(res.res)
	if len(r.queue) == 0 {
		_ = r.out.Flush()
	}
}

func (r *produceRun) printSent(pr client.SendResult) {
	if r.app.JSON {
		_ = r.enc.Encode(sentRow{MsgID: pr.MsgID, Topic: r.o.topic, BrokerID: pr.Partition.BrokerID, Partition: pr.Partition.Partition, Offset: pr.Offset})
		return
	}
	fmt.Fprintf(r.out, "%d %s %d\n", pr.MsgID, pr.Partition, pr.Offset)
}

// summary is what --quiet prints at the end.
func (r *produceRun) summary(el time.Duration) {
	if r.app.JSON {
		_ = r.enc.Encode(map[string]any{"topic": r.o.topic, "sent": r.sent, "seconds": el.Seconds()})
		return
	}
	fmt.Fprintf(r.out, "sent %d message(s) to %s in %s (%.0f msg/s)\n", r.sent, r.o.topic, el.Round(time.Millisecond), float64(r.sent)/max(el.Seconds(), 1e-9))
}

// outcome is the command's result once every put is done: the first failed put, an
// interruption (exit 130), or nothing sent at all (exit 1: the input had no message).
func (r *produceRun) outcome(ctx context.Context) error {
	a := r.app
	if r.firstErr != nil {
		_ = r.out.Flush()
		if errors.Is(r.firstErr, context.Canceled) {
			a.warnf("interrupted after %d message(s)", r.sent)
			return silentExit{code: ExitInterrupted}
		}
		return fmt.Errorf("after %d message(s): %w", r.sent, r.firstErr)
	}
	if ctx.Err() != nil {
		a.warnf("interrupted after %d message(s)", r.sent)
		return silentExit{code: ExitInterrupted}
	}
	if r.sent == 0 {
		return withCode(ExitFailure, "nothing sent: the input had no message (give --message, --file, or lines on stdin)")
	}
	return nil
}
