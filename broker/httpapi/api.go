package httpapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/bytebufferpool"

	"github.com/metaqgo/metaq/broker/auth"
	"github.com/metaqgo/metaq/zkmeta"
)

// The JSON API under /api/v1/ (docs/observability.md lists the routes).
// Pages and API share the view builders of cluster.go; responses are
// rendered into pooled buffers (bytebufferpool) and written with one
// Write.

const apiTimeout = 15 * time.Second

func (s *Server) apiRoutes() {
	s.mux.HandleFunc("GET /api/v1/cluster", s.api(func(r *http.Request) (any, error) {
		return s.cl.clusterView(r.Context())
	}))
	s.mux.HandleFunc("GET /api/v1/topics", s.api(func(r *http.Request) (any, error) {
		ts, err := s.cl.topicSummaries(r.Context())
		for i := range ts {
			ts[i].History = s.smp.topicRates(ts[i].Topic)
			if n := len(ts[i].History); n > 0 {
				ts[i].Rate = ts[i].History[n-1]
			}
		}
		return ts, err
	}))
	s.mux.HandleFunc("GET /api/v1/topics/{topic}", s.api(func(r *http.Request) (any, error) {
		return s.topicView(r.Context(), r.PathValue("topic"))
	}))
	s.mux.HandleFunc("GET /api/v1/groups", s.api(func(r *http.Request) (any, error) {
		return s.cl.groupSummaries(r.Context())
	}))
	s.mux.HandleFunc("GET /api/v1/groups/{group}", s.api(func(r *http.Request) (any, error) {
		return s.groupView(r.Context(), r.PathValue("group"))
	}))
	s.mux.HandleFunc("GET /api/v1/messages", s.api(func(r *http.Request) (any, error) {
		return s.lookup(r)
	}))
	s.mux.HandleFunc(resetRoute, s.api(func(r *http.Request) (any, error) {
		if err := s.authorize(r); err != nil {
			return nil, err
		}
		var req ResetRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, maxAPIBody)).Decode(&req); err != nil {
			return nil, badRequest("bad JSON body: %v", err)
		}
		return s.reset(r.Context(), r.PathValue("group"), req)
	}))
}

// apiError carries an HTTP status.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &apiError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) error {
	return &apiError{http.StatusNotFound, fmt.Sprintf(format, args...)}
}

// api wraps a view builder: JSON out, errors as {"error": "..."} with a
// status (400 bad input, 401/403 token, 404, 409 refused, 503 ZooKeeper or
// a broker unavailable).
func (s *Server) api(f func(r *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
		defer cancel()
		r = r.WithContext(ctx)
		v, err := f(r)
		if err != nil {
			status := http.StatusServiceUnavailable
			var ae *apiError
			switch {
			case errors.As(err, &ae):
				status = ae.status
			case errors.Is(err, zkmeta.ErrNoNode):
				status = http.StatusNotFound
			case errors.Is(err, zkmeta.ErrBadName):
				status = http.StatusBadRequest
			}
			writeJSON(w, status, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	buf := bytebufferpool.Get()
	defer bytebufferpool.Put(buf)
	enc := json.NewEncoder(buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		buf.Reset()
		status = http.StatusInternalServerError
		fmt.Fprintf(buf, "{\"error\": %q}\n", err.Error())
	}
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(buf.B)
}

// authorize checks the dashboardToken of an administrative request:
// `Authorization: Bearer <token>` or `X-Metaq-Token: <token>`.
func (s *Server) authorize(r *http.Request) error {
	// [security] (security.go): an authenticated admin, or the token the
	// guard checked already (PassBearer).
	if s.adminByUser(r) || auth.PassedBearer(r.Context()) {
		return nil
	}
	if s.opts.Token == "" {
		return &apiError{http.StatusForbidden, "read-only: dashboardToken is not set on this server"}
	}
	tok := r.Header.Get("X-Metaq-Token")
	if a := r.Header.Get("Authorization"); tok == "" && strings.HasPrefix(a, "Bearer ") {
		tok = strings.TrimPrefix(a, "Bearer ")
	}
	if tok == "" {
		return &apiError{http.StatusUnauthorized, "this action needs the dashboardToken"}
	}
	if subtle.ConstantTimeCompare([]byte(tok), []byte(s.opts.Token)) != 1 {
		return &apiError{http.StatusUnauthorized, "wrong dashboardToken"}
	}
	return nil
}

func (s *Server) topicView(ctx context.Context, topic string) (*TopicView, error) {
	if s.cl.zk == nil {
		return nil, errNoZK
	}
	if err := zkmeta.ValidateName("topic", topic); err != nil {
		return nil, badRequest("%v", err)
	}
	parts, brokers, err := s.cl.topicPartitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		return nil, notFound("topic %s is not registered by any broker", topic)
	}
	tv := &TopicView{TopicSummary: TopicSummary{Topic: topic, Brokers: brokers, Partitions: len(parts)},
		PartitionList: parts, Groups: []GroupTopicLagRow{}}
	for _, p := range parts {
		tv.Messages += p.Messages
		tv.MaxOffsets += p.Max
	}
	tv.History = s.smp.topicRates(topic)
	if n := len(tv.History); n > 0 {
		tv.Rate = tv.History[n-1]
	}
	groups, err := s.cl.zk.Groups(ctx)
	if err != nil {
		return nil, err
	}
	for _, g := range groups {
		gv, err := s.cl.groupView(ctx, g)
		if err != nil {
			continue
		}
		row, ok := GroupTopicLagRow{Group: g}, false
		for _, p := range gv.Partitions {
			if p.Topic == topic {
				row.Lag += p.Lag
				ok = true
			}
		}
		for _, m := range gv.Members {
			for _, t := range m.Topics {
				if t == topic {
					row.Members++
					ok = true
				}
			}
		}
		if ok {
			tv.Groups = append(tv.Groups, row)
		}
	}
	if raw, _, err := s.cl.zk.Get(ctx, topicConfigPath(s.cl.zk, topic)); err == nil {
		tv.Config = &TopicConfigView{Raw: string(raw)}
	}
	return tv, nil
}

func (s *Server) groupView(ctx context.Context, group string) (*GroupView, error) {
	if err := zkmeta.ValidateName("group", group); err != nil {
		return nil, badRequest("%v", err)
	}
	if s.cl.zk != nil {
		ok, err := s.cl.zk.Exists(ctx, s.cl.zk.Paths().Group(group))
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, notFound("group %s is not in ZooKeeper", group)
		}
	}
	gv, err := s.cl.groupView(ctx, group)
	if err != nil {
		return nil, err
	}
	gv.History = s.smp.groupLag(group)
	return gv, nil
}

// lookup: ?id=<msgId> | ?topic=&key= | ?topic=&time=[&partition=b-p][&count=n]
func (s *Server) lookup(r *http.Request) (*Lookup, error) {
	q := r.URL.Query()
	ctx := r.Context()
	if id := strings.TrimSpace(q.Get("id")); id != "" {
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil || n < 0 {
			return nil, badRequest("bad message id %q: want the decimal msgId", id)
		}
		return s.cl.lookupID(ctx, n)
	}
	topic := strings.TrimSpace(q.Get("topic"))
	if err := zkmeta.ValidateName("topic", topic); err != nil {
		return nil, badRequest("give id, or topic with key or time: %v", err)
	}
	if key := strings.TrimSpace(q.Get("key")); key != "" {
		return s.cl.lookupKey(ctx, topic, key)
	}
	if ts := strings.TrimSpace(q.Get("time")); ts != "" {
		t, err := parseTime(ts, time.Now())
		if err != nil {
			return nil, badRequest("%v", err)
		}
		count, _ := strconv.Atoi(q.Get("count"))
		return s.cl.lookupTime(ctx, topic, strings.TrimSpace(q.Get("partition")), t, count)
	}
	return nil, badRequest("give id, or topic with key or time")
}

// parseTime reads RFC 3339 (with or without zone: local), a
// datetime-local value (2006-01-02T15:04), @<unix ms>, or -<duration> ago.
func parseTime(s string, now time.Time) (time.Time, error) {
	if ms, ok := strings.CutPrefix(s, "@"); ok {
		n, err := strconv.ParseInt(ms, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("bad time %q: @ wants unix milliseconds", s)
		}
		return time.UnixMilli(n), nil
	}
	if strings.HasPrefix(s, "-") {
		d, err := time.ParseDuration(s[1:])
		if err != nil {
			return time.Time{}, fmt.Errorf("bad time %q: -<duration> such as -15m", s)
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04:05"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("bad time %q: RFC 3339, 2006-01-02T15:04, @<unix ms> or -<duration>", s)
}

// ResetRequest moves a group's committed offsets of a topic.
type ResetRequest struct {
	Topic     string `json:"topic"`
	To        string `json:"to"`                  // earliest, latest, an offset, or a time (parseTime)
	Partition string `json:"partition,omitempty"` // "<brokerId>-<partition>"; "" = every partition
	Force     bool   `json:"force,omitempty"`     // even while the group has live consumers of the topic
}

// OffsetChange is one partition moved by a reset.
type OffsetChange struct {
	Partition string `json:"partition"`
	Old       *int64 `json:"old,omitempty"`
	New       int64  `json:"new"`
}

// ResetResult is the answer to a reset.
type ResetResult struct {
	Group   string         `json:"group"`
	Topic   string         `json:"topic"`
	To      string         `json:"to"`
	Changes []OffsetChange `json:"changes"`
}

func (s *Server) reset(ctx context.Context, group string, req ResetRequest) (*ResetResult, error) {
	zc := s.cl.zk
	if zc == nil {
		return nil, errNoZK
	}
	if err := zkmeta.ValidateName("group", group); err != nil {
		return nil, badRequest("%v", err)
	}
	if err := zkmeta.ValidateName("topic", req.Topic); err != nil {
		return nil, badRequest("%v", err)
	}
	parts, _, err := s.cl.topicPartitions(ctx, req.Topic)
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		return nil, notFound("topic %s is not registered by any broker", req.Topic)
	}
	gi, err := zc.DescribeGroup(ctx, group)
	if err != nil {
		return nil, err
	}
	var live []string
	for _, c := range gi.Consumers {
		for _, t := range c.Topics {
			if t == req.Topic {
				live = append(live, c.Node)
			}
		}
	}
	if len(live) > 0 && !req.Force {
		return nil, &apiError{http.StatusConflict, fmt.Sprintf("group %s has live consumers of %s (%s): they would overwrite the offsets; stop them or force",
			group, req.Topic, strings.Join(live, ", "))}
	}
	old := map[string]int64{}
	for _, o := range gi.Offsets {
		if o.Topic == req.Topic {
			old[o.Partition.String()] = o.Offset.Offset
		}
	}
	res := &ResetResult{Group: group, Topic: req.Topic, To: req.To, Changes: []OffsetChange{}}
	var to int64
	var at time.Time
	mode := strings.ToLower(strings.TrimSpace(req.To))
	switch mode {
	case "earliest", "latest":
	default:
		if n, err := strconv.ParseInt(mode, 10, 64); err == nil && n >= 0 {
			to, mode = n, "offset"
		} else if t, err := parseTime(req.To, time.Now()); err == nil {
			at, mode = t, "time"
		} else {
			return nil, badRequest("bad \"to\" %q: earliest, latest, an offset or a time", req.To)
		}
	}
	for _, p := range parts {
		if req.Partition != "" && p.Name != req.Partition {
			continue
		}
		if p.Error != "" {
			return nil, fmt.Errorf("partition %s: %s", p.Name, p.Error)
		}
		var n int64
		switch mode {
		case "earliest":
			n = p.Min
		case "latest":
			n = p.Max
		case "offset":
			n = min(max(to, p.Min), p.Max)
		case "time":
			if n, err = s.cl.admin.OffsetForTime(ctx, p.Addr, req.Topic, p.Partition, at); err != nil {
				return nil, fmt.Errorf("partition %s: %w", p.Name, err)
			}
		}
		ch := OffsetChange{Partition: p.Name, New: n}
		if o, ok := old[p.Name]; ok {
			ch.Old = &o
		}
		res.Changes = append(res.Changes, ch)
	}
	if len(res.Changes) == 0 {
		return nil, notFound("topic %s has no partition %s", req.Topic, req.Partition)
	}
	for _, ch := range res.Changes {
		p, _ := zkmeta.ParsePartition(ch.Partition)
		if err := zc.CommitOffset(ctx, group, req.Topic, p, zkmeta.Offset{MsgID: -1, Offset: ch.New}); err != nil {
			return nil, err
		}
	}
	s.log.Info("consumer offsets reset through the HTTP API", "group", group, "topic", req.Topic, "to", req.To, "partitions", len(res.Changes))
	s.RefreshLag()
	return res, nil
}

// topicConfigPath is the online topic configuration node (metaq extension,
// docs/zookeeper.md).
func topicConfigPath(zc *zkmeta.Client, topic string) string {
	root := zc.Paths().Root()
	if root == "/" {
		root = ""
	}
	return root + "/config/topics/" + topic
}
