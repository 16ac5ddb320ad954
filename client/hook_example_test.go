package client_test

import (
	"context"
	"fmt"
	"time"

	"github.com/metaqgo/metaq/client"
)

// Span is what a tracing library's span offers (OpenTelemetry's trace.Span
// has these methods under other names: End, RecordError, SpanContext).
type Span interface {
	End(err error)
	Context() string // the span context to propagate, e.g. a W3C traceparent
}

// Tracer starts spans (OpenTelemetry: trace.Tracer.Start with a parent
// taken from ctx or from a propagated traceparent).
type Tracer interface {
	Start(ctx context.Context, name, parent string) (context.Context, Span)
}

// spanHook turns every send and every handler call into a span: the send's
// span context travels in the message's properties, the handler's span is
// its child and its context is what the handler gets.
type spanHook struct {
	client.NopHook
	t Tracer
}

func (h spanHook) BeforeSend(e *client.SendEvent) {
	_, span := h.t.Start(e.Ctx, "send "+e.Message.Topic, "")
	if e.Message.Properties == nil {
		e.Message.Properties = map[string]string{}
	}
	e.Message.Properties["traceparent"] = span.Context()
	e.Span = span
}

func (h spanHook) AfterSend(e *client.SendEvent) {
	if span, ok := e.Span.(Span); ok {
		span.End(e.Err)
	}
}

func (h spanHook) BeforeConsume(e *client.ConsumeEvent) {
	ctx, span := h.t.Start(e.Ctx, "handle "+e.Message.Topic, e.Message.Properties["traceparent"])
	e.Ctx, e.Span = ctx, span // the handler gets ctx
}

func (h spanHook) AfterConsume(e *client.ConsumeEvent) {
	if span, ok := e.Span.(Span); ok {
		span.End(e.Err)
	}
}

// printTracer is a stand-in tracer for the example.
type printTracer struct{}

type printSpan struct {
	name, id string
	start    time.Time
}

func (printTracer) Start(ctx context.Context, name, parent string) (context.Context, Span) {
	return ctx, &printSpan{name: name, id: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", start: time.Now()}
}

func (s *printSpan) End(err error)   { fmt.Println(s.name, "ended, error:", err) }
func (s *printSpan) Context() string { return s.id }

func ExampleHook() {
	cfg := client.Config{
		ZKConnect: "127.0.0.1:2181",
		Hooks:     []client.Hook{spanHook{t: printTracer{}}},
		Trace:     true, // the built-in %TRACE% writer runs beside it
	}
	_ = cfg // client.NewProducer(cfg), client.NewConsumer(cfg, "billing")
	// Output:
}
