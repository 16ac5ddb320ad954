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

// sendResult is a put's outcome, handed from the producer's callback to the printer.
type sendResult struct {
	res client.SendResult
	err error
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
	for _, k := range o.keys {
		if k == "" || strings.ContainsAny(k, " \t\r\n") {
			return usageErr("bad --key %q: keys are single words", k)
		}
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
	prog := a.newProgress("produce "+o.topic+":", o.quiet)
	defer prog.finish()

	start := time.Now()
	var sent int64
	var queue []chan sendResult // in send order: results are printed in that order
	out := bufio.NewWriter(a.Stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	var firstErr error

	// complete waits for the oldest put and prints its result.
	complete := func() {
		ch := queue[0]
		queue = queue[1:]
		var r sendResult
		select {
		case r = <-ch:
		case <-ctx.Done():
			r.err = ctx.Err()
		}
		if r.err != nil {
			if firstErr == nil {
				firstErr = r.err
			}
			return
		}
		sent++
		prog.add(1)
		if o.quiet {
			return
		}
		pr := r.res
		if a.JSON {
			_ = enc.Encode(sentRow{MsgID: pr.MsgID, Topic: o.topic, BrokerID: pr.Partition.BrokerID, Partition: pr.Partition.Partition, Offset: pr.Offset})
		} else {
			fmt.Fprintf(out, "%d %s %d\n", pr.MsgID, pr.Partition, pr.Offset)
		}
		if len(queue) == 0 {
			_ = out.Flush()
		}
	}

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
		msg := &client.Message{Topic: o.topic, Body: body, Tag: o.tag, Keys: o.keys} // never modified: shared by its --count sends
		for range o.count {
			if firstErr != nil || ctx.Err() != nil {
				break loop
			}
			ch := make(chan sendResult, 1)
			snd.send(ctx, msg, func(res client.SendResult, err error) { ch <- sendResult{res, err} })
			queue = append(queue, ch)
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
