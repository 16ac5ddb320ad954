package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/zkmeta"
)

// The trace view (docs/trace.md): GET /api/v1/trace?id=<msgId> or
// ?topic=<t>&key=<k> answers the timelines as JSON (the shape of `metaq
// trace --json`); GET /trace shows them as a table with a search box.

// TraceLookup is the answer of /api/v1/trace: one timeline per message.
type TraceLookup struct {
	Traces []*client.MessageTrace `json:"traces"`
	Errors []string               `json:"errors,omitempty"`
}

// traceRow is one row of the trace page.
type traceRow struct {
	Time, Type, Where, Who, Attempt, Cost, Result, Detail string
	Failed                                                bool
}

type traceTable struct {
	*client.MessageTrace
	Rows []traceRow
}

func (s *Server) traceRoutes() {
	s.mux.HandleFunc("GET /api/v1/trace", s.api(func(r *http.Request) (any, error) {
		return s.traceLookup(r)
	}))
	s.mux.HandleFunc("GET /trace", s.page("trace", "trace", func(ctx context.Context, r *http.Request, p *page) (any, error) {
		p.Title = "Message trace"
		q := r.URL.Query()
		p.Query = lookupQuery{ID: q.Get("id"), Topic: q.Get("topic"), Key: q.Get("key")}
		if p.Query.ID == "" && p.Query.Key == "" {
			return nil, nil
		}
		l, err := s.traceLookup(r.WithContext(ctx))
		if err != nil {
			return nil, err
		}
		var tables []traceTable
		for _, mt := range l.Traces {
			tt := traceTable{MessageTrace: mt}
			for i := range mt.Events {
				e := &mt.Events[i]
				var t0 int64
				if i > 0 {
					t0 = mt.Events[0].Time
				}
				tt.Rows = append(tt.Rows, traceRow{Time: e.TimeText(t0), Type: string(e.Type), Where: e.Where(), Who: e.Who(),
					Attempt: e.AttemptText(), Cost: e.CostText(), Result: e.Result(), Detail: e.DetailText(), Failed: e.Err != ""})
			}
			tables = append(tables, tt)
		}
		return struct {
			Tables []traceTable
			Errors []string
		}{tables, l.Errors}, nil
	}))
}

// traceLookup reads the timelines: by id from the message's broker, by
// topic and key from every broker serving the topic.
func (s *Server) traceLookup(r *http.Request) (*TraceLookup, error) {
	q := r.URL.Query()
	ctx := r.Context()
	if id := strings.TrimSpace(q.Get("id")); id != "" {
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil || n < 0 {
			return nil, badRequest("bad message id %q: want the decimal msgId", id)
		}
		bid, _ := protocol.SplitMsgID(n)
		addr, err := s.traceAddr(ctx, bid)
		if err != nil {
			return nil, err
		}
		mt, err := s.cl.admin.Trace(ctx, addr, n)
		if err != nil {
			return nil, err
		}
		return &TraceLookup{Traces: []*client.MessageTrace{mt}}, nil
	}
	topic, key := strings.TrimSpace(q.Get("topic")), strings.TrimSpace(q.Get("key"))
	if err := zkmeta.ValidateName("topic", topic); err != nil || key == "" || strings.ContainsAny(key, " \t\r\n") {
		return nil, badRequest("give id, or topic and key (one word)")
	}
	var addrs []string
	if s.zk != nil {
		parts, _, err := s.cl.topicPartitions(ctx, topic)
		if err != nil {
			return nil, err
		}
		for _, p := range parts {
			if p.Addr != "" && !containsString(addrs, p.Addr) {
				addrs = append(addrs, p.Addr)
			}
		}
	} else if b := s.opts.Broker; b != nil {
		addrs = []string{b.Server.Addr().String()}
	}
	l := &TraceLookup{Traces: []*client.MessageTrace{}}
	mts, err := s.cl.admin.TraceKey(ctx, addrs, topic, key, maxLookup)
	if err != nil {
		l.Errors = append(l.Errors, err.Error())
	}
	if mts != nil {
		l.Traces = mts
	}
	return l, nil
}

// traceAddr is the address of broker id: this broker's own, else from
// ZooKeeper.
func (s *Server) traceAddr(ctx context.Context, id int) (string, error) {
	if b := s.opts.Broker; b != nil && b.Config.System.BrokerID == id {
		return b.Server.Addr().String(), nil
	}
	return s.cl.brokerAddr(ctx, id)
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
