// Package brokertest starts real brokers on 127.0.0.1:0 for tests and talks
// to them over raw TCP.
package brokertest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/broker/auth"
	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/conf"
	"github.com/metaqgo/metaq/protocol"
)

// Options shape a test broker. Zero values give a standalone broker with
// async flush, small segments and topics "test" (4 partitions) and "meta-test".
type Options struct {
	Dir       string         // data dir; default t.TempDir()
	Sync      bool           // unflushThreshold=0 (group commit)
	Topics    map[string]int // topic (wildcards allowed) → partitions
	ExtraINI  string         // appended to [system]
	BrokerID  int
	Server    func(*broker.Options) // last-minute changes
	StoreConf func(*store.Config)
	Logger    *slog.Logger
	SegSize   int64  // maxSegmentSize; default 1 MiB
	ZK        string // zk.zkConnect; "" = standalone (zk.zkEnable=false)
	ZKRoot    string // zk.zkRoot; default /meta
}

// Broker is a running test broker.
type Broker struct {
	*broker.Broker
	Addr   string
	Dir    string
	t      testing.TB
	closed bool
}

// INI renders a server.ini for o.
func INI(o Options) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[system]\nbrokerId=%d\nserverPort=0\ndashboardHttpPort=0\nhostName=127.0.0.1\nbindHost=127.0.0.1\n", o.BrokerID)
	seg := o.SegSize
	if seg == 0 {
		seg = 1 << 20
	}
	fmt.Fprintf(&b, "dataPath=%s\nmaxSegmentSize=%d\nmaxMessageSize=524288\nindexFileSize=65536\n", o.Dir, seg)
	if o.Sync {
		b.WriteString("unflushThreshold=0\n")
	} else {
		b.WriteString("unflushThreshold=1000\nunflushInterval=1000\n")
	}
	b.WriteString(o.ExtraINI)
	if o.ZK == "" {
		b.WriteString("\n[zookeeper]\nzk.zkEnable=false\n")
	} else {
		root := o.ZKRoot
		if root == "" {
			root = "/meta"
		}
		fmt.Fprintf(&b, "\n[zookeeper]\nzk.zkEnable=true\nzk.zkConnect=%s\nzk.zkRoot=%s\nzk.zkSessionTimeoutMs=6000\nzk.zkConnectionTimeoutMs=10000\nzk.zkSyncTimeMs=50\n", o.ZK, root)
	}
	topics := o.Topics
	if topics == nil {
		topics = map[string]int{"test": 4, "meta-test": 1}
	}
	names := make([]string, 0, len(topics))
	for n := range topics {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "\n[topic=%s]\nnumPartitions=%d\n", n, topics[n])
	}
	return b.String()
}

// RunBroker starts a broker, waits until it answers `version`, and registers
// its shutdown with t.Cleanup.
func RunBroker(t testing.TB, o Options) *Broker {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	path := filepath.Join(o.Dir, "server.ini")
	if err := os.WriteFile(path, []byte(INI(o)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := conf.Load(path)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	bk, err := broker.StartWith(cfg, broker.StartOptions{Logger: log, Server: o.Server, Store: o.StoreConf})
	if err != nil {
		t.Fatalf("starting broker: %v", err)
	}
	b := &Broker{Broker: bk, Addr: bk.Server.Addr().String(), Dir: o.Dir, t: t}
	t.Cleanup(b.Stop)
	c := b.Dial()
	c.Send("version 1\r\n")
	if r := c.Reply(); r.Code != 200 {
		t.Fatalf("broker not ready: %+v", r)
	}
	c.Close()
	return b
}

// Stop shuts the broker down gracefully (idempotent).
func (b *Broker) Stop() {
	if b.closed {
		return
	}
	b.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Broker.Stop(ctx); err != nil {
		b.t.Errorf("stopping broker: %v", err)
	}
}

// Client is a raw text-protocol connection for tests.
type Client struct {
	Conn net.Conn
	R    *protocol.ReplyReader
	W    *bufio.Writer
	t    testing.TB
}

// Dial connects to the broker.
func (b *Broker) Dial() *Client { return Dial(b.t, b.Addr) }

// Dial connects to addr.
func Dial(t testing.TB, addr string) *Client {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { nc.Close() })
	return Wrap(t, nc)
}

// Wrap makes a Client of an open connection (a TLS one, say).
func Wrap(t testing.TB, nc net.Conn) *Client {
	return &Client{Conn: nc, R: protocol.NewReplyReader(nc, 64<<20), W: bufio.NewWriterSize(nc, 64<<10), t: t}
}

// Send writes raw bytes and flushes.
func (c *Client) Send(s string) {
	c.t.Helper()
	c.SendBytes([]byte(s))
}

// SendBytes writes raw bytes and flushes.
func (c *Client) SendBytes(b []byte) {
	c.t.Helper()
	if _, err := c.W.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
	if err := c.W.Flush(); err != nil {
		c.t.Fatalf("flush: %v", err)
	}
}

// Reply reads the next reply (10 s deadline); Body is copied.
func (c *Client) Reply() protocol.Reply {
	c.t.Helper()
	r, err := c.TryReply(10 * time.Second)
	if err != nil {
		c.t.Fatalf("reading reply: %v", err)
	}
	return r
}

// TryReply reads the next reply within d.
func (c *Client) TryReply(d time.Duration) (protocol.Reply, error) {
	_ = c.Conn.SetReadDeadline(time.Now().Add(d))
	r, err := c.R.Next()
	if err != nil {
		return r, err
	}
	r.Body = append([]byte(nil), r.Body...)
	return r, nil
}

// ExpectClosed asserts the broker closes the connection within d.
func (c *Client) ExpectClosed(d time.Duration) {
	c.t.Helper()
	_ = c.Conn.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 4096)
	for {
		_, err := c.Conn.Read(buf)
		if err == io.EOF || (err != nil && !isTimeout(err)) {
			return
		}
		if err != nil {
			c.t.Fatalf("connection still open after %v", d)
		}
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// Close closes the connection.
func (c *Client) Close() { c.Conn.Close() }

// Put sends a put and returns msgId, partition, offset (fails the test on error).
func (c *Client) Put(topic string, partition int, data string, opaque int32) (int64, int32, int64) {
	c.t.Helper()
	c.Send(fmt.Sprintf("put %s %d %d 0 %d\r\n%s", topic, partition, len(data), opaque, data))
	r := c.Reply()
	if r.Code != 200 || r.Opaque != opaque {
		c.t.Fatalf("put: %+v %q", r, r.Body)
	}
	id, p, off, err := protocol.ParsePutResult(r.Body)
	if err != nil {
		c.t.Fatalf("put result %q: %v", r.Body, err)
	}
	return id, p, off
}

// Records decodes a value body.
func Records(t testing.TB, body []byte) []protocol.Record {
	t.Helper()
	var out []protocol.Record
	it := protocol.NewRecordIterator(body)
	for it.Next() {
		r := *it.Record()
		r.Topic = append([]byte(nil), r.Topic...)
		r.Properties = append([]byte(nil), r.Properties...)
		r.Data = append([]byte(nil), r.Data...)
		out = append(out, r)
	}
	if err := it.Err(); err != nil {
		t.Fatalf("decoding value block: %v", err)
	}
	return out
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// RootUsersFile writes dir/users.ini with one user, root, an admin whose
// secret is secret, and returns its path (a usersFile for [security]).
func RootUsersFile(t testing.TB, dir, secret string) string {
	t.Helper()
	h, err := auth.HashSecret(secret, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	users := filepath.Join(dir, "users.ini")
	if err := os.WriteFile(users, []byte("[root]\nsecret = "+h+"\nadmin = true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return users
}
