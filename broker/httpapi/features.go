package httpapi

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metaqgo/metaq/broker"
)

// Metrics of the features riding on the log: delayed messages / retries /
// dead letters (broker/delay), transactions (broker/tx) and the broker's
// own trace events (broker/tracelog), read at scrape time from their Stats.

var (
	dDelayed     = desc("metaq_delayed_messages", "Delayed messages stored and not yet delivered, per delay level (level 0 = deliverAt timer).", "level")
	dDelayLag    = desc("metaq_delay_timer_lag_seconds", "How far behind the delay timer is (0 when on time).")
	dDelivered   = desc("metaq_delayed_delivered_total", "Delayed messages delivered to their topic.")
	dRetried     = desc("metaq_retries_total", "Messages sent back for a retry with growing delay.")
	dDeadLetters = desc("metaq_dead_letters_total", "Messages moved to a dead-letter topic.")
	dTxHalf      = desc("metaq_tx_half_messages", "Transactional (half) messages waiting for commit or rollback.")
	dTxOpen      = desc("metaq_tx_open", "Transactions begun and not yet prepared or finished.")
	dTxPrepared  = desc("metaq_tx_prepared", "Prepared XA transactions.")
	dTxHeld      = desc("metaq_tx_held_bytes", "Bytes held in memory by open transactions.")
	dTxBegun     = desc("metaq_tx_begun_total", "Transactions begun.", "kind")
	dTxEnded     = desc("metaq_tx_ended_total", "Transactions ended, by outcome.", "outcome")
	dTxChecks    = desc("metaq_tx_checks_sent_total", "Transaction checks sent to producers.")
	dTraceEvents = desc("metaq_trace_events_total", "The broker's own trace events (docs/trace.md): written to %TRACE%, dropped (queue full), failed (the store refused their batch).", "result")
)

type featureCollector struct{ b *broker.Broker }

func (c featureCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dDelayed, dDelayLag, dDelivered, dRetried, dDeadLetters,
		dTxHalf, dTxOpen, dTxPrepared, dTxHeld, dTxBegun, dTxEnded, dTxChecks, dTraceEvents} {
		ch <- d
	}
}

func (c featureCollector) Collect(ch chan<- prometheus.Metric) {
	if d := c.b.Delay; d != nil {
		st := d.Stats()
		gauge(ch, dDelayed, float64(st.TimerPending), "0")
		for i, n := range st.LevelPending {
			gauge(ch, dDelayed, float64(n), strconv.Itoa(i+1))
		}
		gauge(ch, dDelayLag, float64(st.TimerLagMs)/1000)
		counter(ch, dDelivered, float64(st.Delivered))
		counter(ch, dRetried, float64(st.Retried))
		counter(ch, dDeadLetters, float64(st.DeadLetters))
	}
	if c.b.Server.Tx() != nil {
		st := c.b.Server.TxStats()
		gauge(ch, dTxHalf, float64(st.PendingHalf))
		gauge(ch, dTxOpen, float64(st.Open))
		gauge(ch, dTxPrepared, float64(st.Prepared))
		gauge(ch, dTxHeld, float64(st.HeldBytes))
		counter(ch, dTxBegun, float64(st.Begun), "local")
		counter(ch, dTxBegun, float64(st.XABegun), "xa")
		counter(ch, dTxEnded, float64(st.Committed), "commit")
		counter(ch, dTxEnded, float64(st.RolledBack), "rollback")
		counter(ch, dTxEnded, float64(st.TimedOut), "timeout")
		counter(ch, dTxChecks, float64(st.ChecksSent))
	}
	if w := c.b.Trace; w != nil {
		written, dropped, failed := w.Stats()
		counter(ch, dTraceEvents, float64(written), "written")
		counter(ch, dTraceEvents, float64(dropped), "dropped")
		counter(ch, dTraceEvents, float64(failed), "failed")
	}
}
