package benchkit

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Alternating phases (topics-1000, partitions-10000, for metaq and every peer alike).
//
// A degradation ratio compares two rates. Measured as one long base phase followed by one long
// spread phase, a VM stall or a neighbour's burst during either phase moves the ratio by tens
// of percent. Alternate instead runs Pairs pairs of short phases in the order
//
//	base spread | spread base | base spread | …
//
// (each pair's two phases are adjacent, and which comes first alternates, so a steady drift of
// the machine's speed favours neither side), and the ratio is the median of the pairs' ratios:
// a stall spoils one pair, not the row. The workload is unchanged: the same total measured time
// (each phase is the row's duration / Pairs, so the base and the spread side each get the
// duration), the same messages, window and connections.

// PhaseRun is one measured phase: messages completed, wall time, and the CPU time the server
// used during it (0 when not measured).
type PhaseRun struct {
	Msgs      int64
	Elapsed   time.Duration
	ServerCPU time.Duration
}

// Rate is the phase's messages per second.
func (p PhaseRun) Rate() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Msgs) / p.Elapsed.Seconds()
}

// Alternation is the outcome of Alternate.
type Alternation struct {
	Base, Spread []PhaseRun // in run order
	Ratios       []float64  // spread rate / base rate of each pair, in run order
}

// Alternate runs pairs pairs of phases; phase(spread, i) measures the i-th phase of its side
// (i counts from 0 on each side). The first error stops it.
func Alternate(pairs int, phase func(spread bool, i int) (PhaseRun, error)) (Alternation, error) {
	var a Alternation
	if pairs < 1 {
		return a, fmt.Errorf("benchkit: %d phase pairs, want >= 1", pairs)
	}
	for i := range pairs {
		order := [2]bool{false, true}
		if i%2 == 1 {
			order = [2]bool{true, false}
		}
		for _, spread := range order {
			n := len(a.Base)
			if spread {
				n = len(a.Spread)
			}
			p, err := phase(spread, n)
			if err != nil {
				return a, err
			}
			if spread {
				a.Spread = append(a.Spread, p)
			} else {
				a.Base = append(a.Base, p)
			}
		}
		if b := a.Base[i].Rate(); b > 0 {
			a.Ratios = append(a.Ratios, a.Spread[i].Rate()/b)
		} else {
			a.Ratios = append(a.Ratios, 0)
		}
	}
	return a, nil
}

// Median is the median of the pairs' ratios.
func (a Alternation) Median() float64 { return Median(a.Ratios) }

// total sums one side's phases.
func total(ps []PhaseRun) PhaseRun {
	var t PhaseRun
	for _, p := range ps {
		t.Msgs += p.Msgs
		t.Elapsed += p.Elapsed
		t.ServerCPU += p.ServerCPU
	}
	return t
}

// BaseTotal and SpreadTotal sum each side's phases.
func (a Alternation) BaseTotal() PhaseRun   { return total(a.Base) }
func (a Alternation) SpreadTotal() PhaseRun { return total(a.Spread) }

// SetAlternation fills r from a: the spread side's messages, time and server CPU per message
// (summed over its phases), the base side's rate as the baseline, and the median of the pairs'
// ratios as DegradationRatio (not the ratio of the sums, which one stalled phase would move).
// The pairs' ratios are appended to the notes.
func (r *Result) SetAlternation(a Alternation) {
	s, b := a.SpreadTotal(), a.BaseTotal()
	r.SetThroughput(s.Msgs, s.Elapsed)
	if s.ServerCPU > 0 {
		r.SetServerCPU(s.ServerCPU, s.Msgs)
	}
	r.BaselineMsgsPerSec = round(b.Rate(), 1)
	r.DegradationRatio = round(a.Median(), 3)
	note := a.Note()
	if r.Notes == "" {
		r.Notes = note
	} else {
		r.Notes += "; " + note
	}
}

// Note describes the method and every pair's ratio, e.g.
// "5 alternating pairs of 1s phases (base/spread ABBA), ratio = median of [0.91 0.95 0.93 0.62 0.94]; ratio of the sums 0.87".
func (a Alternation) Note() string {
	var d time.Duration
	if len(a.Base) > 0 {
		d = a.Base[0].Elapsed.Round(100 * time.Millisecond)
	}
	rs := make([]string, len(a.Ratios))
	for i, x := range a.Ratios {
		rs[i] = strconv.FormatFloat(x, 'f', 3, 64)
	}
	sum := 0.0
	if b := a.BaseTotal().Rate(); b > 0 {
		sum = a.SpreadTotal().Rate() / b
	}
	return fmt.Sprintf("%d alternating pairs of ~%s phases (base, spread | spread, base | …), ratio = median of the pairs [%s]; ratio of the sums %.3f",
		len(a.Ratios), d, strings.Join(rs, " "), sum)
}

// Median is the median of v (0 for none); v is not modified.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// PhaseLength splits a row's duration into pairs phases per side (at least 100 ms each).
func PhaseLength(d time.Duration, pairs int) time.Duration {
	if pairs < 1 {
		pairs = 1
	}
	return max(d/time.Duration(pairs), 100*time.Millisecond)
}
