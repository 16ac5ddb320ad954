package httpapi

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/bytebufferpool"

	"github.com/metaqgo/metaq/broker"
	"github.com/metaqgo/metaq/protocol"
)

// The HTTP gateway (docs/http.md): the data-plane endpoints of a broker's
// HTTP side, for clients that do not speak the text protocol.
//
//	POST /api/v1/topics/{topic}/messages               publish one message (this file)
//	GET  /api/v1/groups/{group}/topics/{topic}/ws      WebSocket delivery with acks (gateway_ws.go)
//
// They exist only next to a broker (ForBroker), follow the text protocol's
// rules (no dashboardToken), and every request passes s.authorizeData
// first: the one place where data-plane access is decided.

// DataAccess describes a data-plane request for Options.DataAuth.
type DataAccess struct {
	Op    string // "publish" or "subscribe"
	Topic string
	Group string // subscribe only
}

// authorizeData decides whether r may do a. Without Options.DataAuth every
// request is let in, as on the text protocol port.
func (s *Server) authorizeData(r *http.Request, a DataAccess) error {
	f := s.opts.DataAuth
	if f == nil {
		return nil
	}
	err := f(r, a)
	var ae *apiError
	if err != nil && !errors.As(err, &ae) {
		err = &apiError{http.StatusForbidden, err.Error()}
	}
	return err
}

// StatusError is an error that answers a request with status (for
// Options.DataAuth: 401 or 403).
func StatusError(status int, msg string) error { return &apiError{status, msg} }

const (
	// publishReadTimeout bounds the time a publisher may take to send its
	// body (as putDataTimeoutMs does on the text protocol).
	publishReadTimeout = 30 * time.Second
	// bodyReadTimeout bounds the time any request's body may take
	// (security.go's bodyBudget).
	bodyReadTimeout = publishReadTimeout
	// maxAPIBody bounds the JSON bodies of the API (an offset reset).
	maxAPIBody = 64 << 10
	// publishTimeout bounds the wait for the put budget and the group commit.
	publishTimeout = 30 * time.Second
)

const publishRoute = "POST /api/v1/topics/{topic}/messages"

func (s *Server) gatewayRoutes() {
	if s.opts.Broker != nil {
		s.mux.HandleFunc(publishRoute, s.handlePublish)
	}
	if s.opts.Delivery != nil {
		s.mux.HandleFunc("GET /api/v1/groups/{group}/topics/{topic}/ws", s.handleWS)
	}
}

// PublishReply is the answer to a publish: the text protocol's put reply.
type PublishReply struct {
	MsgID     string `json:"msgId"` // decimal string: msgIds exceed JavaScript's exact integers
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"` // queue offset; -1 for a delayed message (not in its topic yet)
}

// putStatus maps a protocol status of a refused put to an HTTP status.
func putStatus(code int) int {
	switch code {
	case protocol.StatusBadRequest:
		return http.StatusBadRequest
	case protocol.StatusForbidden:
		return http.StatusForbidden
	case protocol.StatusServiceUnavailable:
		return http.StatusServiceUnavailable
	case protocol.StatusNotFound:
		return http.StatusNotFound
	}
	return http.StatusInternalServerError
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// badInput answers a data-plane request whose input does not parse (400),
// counts it as the text protocol counts its bad requests
// (metaq_bad_requests_total) and logs it at debug level (rate-limited).
func (s *Server) badInput(w http.ResponseWriter, r *http.Request, err error) {
	s.countBadInput(r.URL.Path, err.Error())
	dataError(w, err)
}

func (s *Server) countBadInput(path, msg string) {
	if b := s.opts.Broker; b != nil {
		b.Server.CountBadRequest()
	}
	s.log.Debug("HTTP gateway: bad request", "path", path, "err", msg)
}

// dataError writes err: an *apiError's or *broker.PutError's status, 503
// otherwise.
func dataError(w http.ResponseWriter, err error) {
	var ae *apiError
	var pe *broker.PutError
	switch {
	case errors.As(err, &ae):
		writeError(w, ae.status, ae.msg)
	case errors.As(err, &pe):
		status := pe.Status
		if status == 0 {
			status = putStatus(pe.Code)
		}
		writeError(w, status, pe.Msg)
	case errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusServiceUnavailable, "timed out: "+err.Error())
	default:
		writeError(w, http.StatusServiceUnavailable, err.Error())
	}
}

func (s *Server) handlePublish(w http.ResponseWriter, r *http.Request) {
	topic := r.PathValue("topic")
	if !protocol.ValidName(topic) {
		s.badInput(w, r, badRequest("bad topic name %q", topic))
		return
	}
	if err := s.authorizeData(r, DataAccess{Op: "publish", Topic: topic}); err != nil {
		dataError(w, err)
		return
	}
	opts, err := parsePublishOptions(r)
	if err != nil {
		s.badInput(w, r, err)
		return
	}
	srv := s.opts.Broker.Server
	want, ok := publishWant(srv.MaxMessageSize(), r.ContentLength, opts)
	if !ok {
		writeError(w, http.StatusRequestEntityTooLarge, "message of "+strconv.FormatInt(r.ContentLength+opts.prefixLen(), 10)+
			" bytes exceeds maxMessageSize "+strconv.Itoa(srv.MaxMessageSize()))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), publishTimeout)
	defer cancel()
	// Reserve what the body may hold from the broker-wide put budget before
	// reading it (maxPendingPutBytes): many slow publishers cannot make the
	// broker hold more than that. A signed body was reserved before the
	// guard read it (security.go).
	release, err := s.publishReservation(ctx, r, want+opts.prefixLen())
	if err != nil {
		dataError(w, err)
		return
	}
	defer release()
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(publishReadTimeout))

	buf := bytebufferpool.Get()
	defer bytebufferpool.Put(buf)
	buf.B = opts.appendPrefix(buf.B[:0])
	prefix := len(buf.B)
	if _, err := buf.ReadFrom(io.LimitReader(r.Body, want+1)); err != nil {
		writeError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	if int64(len(buf.B)-prefix) > want {
		writeError(w, http.StatusRequestEntityTooLarge, "message exceeds maxMessageSize "+strconv.Itoa(srv.MaxMessageSize()))
		return
	}
	m := broker.Message{Topic: topic, Partition: opts.partition, Flag: opts.flag, Properties: opts.props, Data: buf.B}
	res, err := srv.Publish(ctx, &m)
	if err != nil {
		dataError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, PublishReply{MsgID: strconv.FormatInt(res.MsgID, 10), Topic: topic,
		Partition: res.Partition, Offset: res.QueueOffset})
}

// publishWant is the most body bytes a publish may bring: its
// Content-Length, or up to the limit when chunked; ok is false when the
// Content-Length is beyond the limit. The data block is [attribute] + body;
// maxMessageSize bounds it whole.
func publishWant(maxMessageSize int, contentLength int64, opts *publishOptions) (want int64, ok bool) {
	maxBody := int64(maxMessageSize) - opts.prefixLen()
	if contentLength > maxBody || maxBody < 0 {
		return 0, false
	}
	if contentLength < 0 {
		return maxBody, true
	}
	return contentLength, true
}

// publishOptions are a publish's parameters, from the query or X-Metaq-*
// headers (docs/http.md).
type publishOptions struct {
	partition int32
	flag      int32
	props     []byte // properties line
	attr      string
	hasAttr   bool
}

func (o *publishOptions) prefixLen() int64 {
	if !o.hasAttr {
		return 0
	}
	return 4 + int64(len(o.attr))
}

// appendPrefix appends MetaQ's attribute block (length + bytes) when there
// is one: the data block is [attribute] + payload.
func (o *publishOptions) appendPrefix(dst []byte) []byte {
	if !o.hasAttr {
		return dst
	}
	n := len(o.attr)
	dst = append(dst, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	return append(dst, o.attr...)
}

// publishParam is one parameter of a publish: its query name and header.
type publishParam struct{ query, header string }

var (
	pPartition  = publishParam{"partition", "X-Metaq-Partition"}
	pFlag       = publishParam{"flag", "X-Metaq-Flag"}
	pTag        = publishParam{"tag", "X-Metaq-Tag"}
	pKeys       = publishParam{"keys", "X-Metaq-Keys"}
	pDelay      = publishParam{"delay", "X-Metaq-Delay"}
	pDeliverAt  = publishParam{"deliverAt", "X-Metaq-Deliver-At"}
	pAttribute  = publishParam{"attribute", "X-Metaq-Attribute"}
	pProperties = publishParam{"properties", "X-Metaq-Properties"}
)

// userPropPrefix marks a user property in the query: p.<name>=<value>.
const userPropPrefix = "p."

// param returns a parameter's value from the query or its header; giving
// both (or the query name twice) is an error.
func param(r *http.Request, q map[string][]string, p publishParam) (string, bool, error) {
	qv, inQuery := q[p.query]
	hv, inHeader := r.Header[p.header]
	switch {
	case inQuery && inHeader:
		return "", false, badRequest("%s is given both as a query parameter and as header %s: give one", p.query, p.header)
	case len(qv) > 1 || len(hv) > 1:
		return "", false, badRequest("%s is given more than once", p.query)
	case inQuery:
		return qv[0], true, nil
	case inHeader:
		return hv[0], true, nil
	}
	return "", false, nil
}

func parsePublishOptions(r *http.Request) (*publishOptions, error) {
	q := r.URL.Query()
	o := &publishOptions{partition: -1}
	if v, ok, err := param(r, q, pPartition); err != nil {
		return nil, err
	} else if ok {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < -1 {
			return nil, badRequest("bad partition %q: a partition number, or -1 to let the broker pick", v)
		}
		o.partition = int32(n)
	}
	if v, ok, err := param(r, q, pFlag); err != nil {
		return nil, err
	} else if ok {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			return nil, badRequest("bad flag %q: a 32-bit integer", v)
		}
		if int32(n)&(protocol.FlagHasAttribute|protocol.FlagHasProperties) != 0 {
			return nil, badRequest("flag bits 0 and 1 are set by the gateway (attribute, properties): leave them 0")
		}
		o.flag = int32(n)
	}
	if v, ok, err := param(r, q, pAttribute); err != nil {
		return nil, err
	} else if ok {
		o.attr, o.hasAttr = v, true
		o.flag |= protocol.FlagHasAttribute
	}
	var props []byte
	add := func(k, v string) {
		if len(props) > 0 {
			props = append(props, '&')
		}
		props = protocol.AppendEscaped(props, k)
		props = append(props, '=')
		props = protocol.AppendEscaped(props, v)
	}
	seen := map[string]bool{}
	if v, ok, err := param(r, q, pTag); err != nil {
		return nil, err
	} else if ok {
		if v == "" || strings.Contains(v, "||") {
			return nil, badRequest("bad tag %q: not empty, no \"||\"", v)
		}
		add(protocol.PropTag, v)
		seen[protocol.PropTag] = true
	}
	if v, ok, err := param(r, q, pKeys); err != nil {
		return nil, err
	} else if ok {
		keys := strings.FieldsFunc(v, func(c rune) bool { return c == ' ' || c == ',' })
		if len(keys) == 0 {
			return nil, badRequest("keys is empty: give space- or comma-separated keys")
		}
		add(protocol.PropKeys, strings.Join(keys, " "))
		seen[protocol.PropKeys] = true
	}
	if v, ok, err := param(r, q, pDelay); err != nil {
		return nil, err
	} else if ok {
		if n, err := strconv.Atoi(v); err != nil || n < 1 {
			return nil, badRequest("bad delay %q: a delay level 1, 2, …", v)
		}
		add(protocol.PropDelay, v)
		seen[protocol.PropDelay] = true
	}
	if v, ok, err := param(r, q, pDeliverAt); err != nil {
		return nil, err
	} else if ok {
		if _, err := strconv.ParseInt(v, 10, 64); err != nil {
			return nil, badRequest("bad deliverAt %q: unix milliseconds", v)
		}
		add("deliverAt", v)
		seen["deliverAt"] = true
	}
	user := func(k, v string) error {
		if k == "" {
			return badRequest("a user property needs a name")
		}
		if seen[k] {
			return badRequest("property %q is given twice", k)
		}
		seen[k] = true
		add(k, v)
		return nil
	}
	if v, ok, err := param(r, q, pProperties); err != nil {
		return nil, err
	} else if ok && v != "" {
		// A properties line: k=v&k2=v2, URL-escaped.
		for rest := []byte(v); len(rest) > 0; {
			var k, val []byte
			k, val, rest = protocol.NextProperty(rest)
			if err := user(protocol.Unescape(k), protocol.Unescape(val)); err != nil {
				return nil, err
			}
		}
	}
	names := make([]string, 0, len(q))
	for k := range q {
		if strings.HasPrefix(k, userPropPrefix) {
			names = append(names, k)
		}
	}
	slices.Sort(names) // a stable properties line
	for _, k := range names {
		vs := q[k]
		name := k[len(userPropPrefix):]
		if len(vs) > 1 {
			return nil, badRequest("property %q is given twice", name)
		}
		if err := user(name, vs[0]); err != nil {
			return nil, err
		}
	}
	if len(props) > protocol.MaxPropertiesLen {
		return nil, badRequest("properties of %d bytes exceed %d", len(props), protocol.MaxPropertiesLen)
	}
	o.props = props
	return o, nil
}
