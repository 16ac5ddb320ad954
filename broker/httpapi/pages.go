package httpapi

import (
	"context"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/bytebufferpool"

	"github.com/metaqgo/metaq/broker/auth"
)

// The dashboard: server-rendered html/template pages over the same view
// builders as the JSON API, plus a little JavaScript (web/static/app.js:
// sparklines, preview tabs, the guarded offset reset through the API).
// Everything is embedded in the binary; there is no build step.

//go:embed web/*.html web/static/*
var webFS embed.FS

var funcs = template.FuncMap{
	"duration": func(s int64) string {
		d := time.Duration(s) * time.Second
		switch {
		case d >= 24*time.Hour:
			return fmt.Sprintf("%dd %dh", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
		case d >= time.Hour:
			return fmt.Sprintf("%dh %dm", d/time.Hour, d%time.Hour/time.Minute)
		}
		return d.String()
	},
	"bytes": func(n int64) string {
		const unit = 1024
		if n < unit {
			return strconv.FormatInt(n, 10) + " B"
		}
		div, exp := int64(unit), 0
		for m := n / unit; m >= unit; m /= unit {
			div *= unit
			exp++
		}
		return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
	},
	"sub": func(a, b int64) int64 { return a - b },
	"pct": func(a, b int64) string {
		if b <= 0 {
			return "0"
		}
		return strconv.FormatFloat(min(100, float64(a)*100/float64(b)), 'f', 1, 64)
	},
	"floats": func(v []float64) string {
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = strconv.FormatFloat(x, 'f', -1, 64)
		}
		return strings.Join(s, ",")
	},
	"maxLag": func(ps []GroupPartitionView) int64 {
		var m int64
		for _, p := range ps {
			m = max(m, p.Lag)
		}
		return m
	},
	"deref": func(p *int64) int64 { return *p },
}

// pages holds one template set per page (each with the layout).
type pages map[string]*template.Template

func loadPages() pages {
	p := pages{}
	for _, name := range []string{"cluster", "topics", "topic", "groups", "group", "messages", "trace"} {
		p[name] = template.Must(template.New("").Funcs(funcs).ParseFS(webFS, "web/layout.html", "web/"+name+".html"))
	}
	return p
}

// page is what every template gets.
type page struct {
	Title    string
	Nav      string
	Error    string
	ReadOnly bool
	User     string // logged in with a dashboard session: the header offers "Log out"
	Served   string
	Now      string
	Minutes  int
	Query    lookupQuery
	Data     any
}

type lookupQuery struct{ ID, Topic, Key, Time, Partition string }

func (s *Server) pageRoutes() {
	s.pages = loadPages()
	static, _ := fs.Sub(webFS, "web/static")
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	s.mux.HandleFunc("GET /{$}", s.page("cluster", "cluster", func(ctx context.Context, r *http.Request, p *page) (any, error) {
		p.Title = "Cluster"
		return s.cl.clusterView(ctx)
	}))
	s.mux.HandleFunc("GET /topics", s.page("topics", "topics", func(ctx context.Context, r *http.Request, p *page) (any, error) {
		p.Title = "Topics"
		ts, err := s.cl.topicSummaries(ctx)
		for i := range ts {
			ts[i].History = s.smp.topicRates(ts[i].Topic)
			if n := len(ts[i].History); n > 0 {
				ts[i].Rate = ts[i].History[n-1]
			}
		}
		return ts, err
	}))
	s.mux.HandleFunc("GET /topics/{topic}", s.page("topic", "topics", func(ctx context.Context, r *http.Request, p *page) (any, error) {
		p.Title = "Topic " + r.PathValue("topic")
		return s.topicView(ctx, r.PathValue("topic"))
	}))
	s.mux.HandleFunc("GET /groups", s.page("groups", "groups", func(ctx context.Context, r *http.Request, p *page) (any, error) {
		p.Title = "Consumer groups"
		return s.cl.groupSummaries(ctx)
	}))
	s.mux.HandleFunc("GET /groups/{group}", s.page("group", "groups", func(ctx context.Context, r *http.Request, p *page) (any, error) {
		p.Title = "Group " + r.PathValue("group")
		return s.groupView(ctx, r.PathValue("group"))
	}))
	s.mux.HandleFunc("GET /messages", s.page("messages", "messages", func(ctx context.Context, r *http.Request, p *page) (any, error) {
		p.Title = "Messages"
		q := r.URL.Query()
		p.Query = lookupQuery{ID: q.Get("id"), Topic: q.Get("topic"), Key: q.Get("key"), Time: q.Get("time"), Partition: q.Get("partition")}
		if p.Query == (lookupQuery{}) || (p.Query.ID == "" && p.Query.Key == "" && p.Query.Time == "") {
			return nil, nil
		}
		return s.lookup(r.WithContext(ctx))
	}))
}

func (s *Server) page(name, nav string, build func(context.Context, *http.Request, *page) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
		defer cancel()
		p := &page{Nav: nav, ReadOnly: s.opts.Token == "", Served: s.served(), Now: time.Now().UTC().Format("2006-01-02 15:04:05 MST"),
			Minutes: ringSize * int(sampleEvery/time.Second) / 60}
		if u, ok := auth.UserFrom(r.Context()); ok {
			if _, err := r.Cookie(auth.SessionCookie); err == nil {
				p.User = u
			}
		}
		status := http.StatusOK
		data, err := build(ctx, r, p)
		if err != nil {
			p.Error = err.Error()
			status = http.StatusServiceUnavailable
			if ae, ok := err.(*apiError); ok {
				status = ae.status
			}
		} else {
			p.Data = data
		}
		buf := bytebufferpool.Get()
		defer bytebufferpool.Put(buf)
		if err := s.pages[name].ExecuteTemplate(buf, "layout", p); err != nil {
			s.log.Error("rendering page", "page", name, "err", err)
			http.Error(w, "rendering the page failed: "+err.Error(), http.StatusInternalServerError)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'")
		w.WriteHeader(status)
		_, _ = w.Write(buf.B)
	}
}

func (s *Server) served() string {
	if b := s.opts.Broker; b != nil {
		return fmt.Sprintf("broker %d (%s)", b.Config.System.BrokerID, b.Server.Addr())
	}
	return "metaq dashboard"
}
