package httpapi

import (
	"context"
	"sync"
	"time"
)

// The sampler keeps a small in-memory ring of recent samples for the
// dashboard's charts: per topic the sum of max offsets (→ messages in per
// second), per group the total lag. It polls every sampleEvery; the ring
// holds ringSize samples (10 minutes). At most maxSampledTopics topics and
// maxSampledGroups groups are followed (the first ones seen), so memory is
// bounded whatever the cluster's size.
const (
	sampleEvery      = 5 * time.Second
	ringSize         = 120
	maxSampledTopics = 1000
	maxSampledGroups = 200
	groupSampleEvery = 3 // group lag every third sample (reads ZooKeeper per group)
)

type ring struct {
	at   [ringSize]time.Time
	v    [ringSize]float64
	n    int // samples stored
	next int
}

func (r *ring) add(t time.Time, v float64) {
	r.at[r.next], r.v[r.next] = t, v
	r.next = (r.next + 1) % ringSize
	if r.n < ringSize {
		r.n++
	}
}

// values returns the samples oldest first.
func (r *ring) values() ([]time.Time, []float64) {
	ts, vs := make([]time.Time, 0, r.n), make([]float64, 0, r.n)
	for i := 0; i < r.n; i++ {
		j := (r.next - r.n + i + ringSize) % ringSize
		ts, vs = append(ts, r.at[j]), append(vs, r.v[j])
	}
	return ts, vs
}

// rates turns cumulative samples into per-second rates (one fewer value).
func (r *ring) rates() []float64 {
	ts, vs := r.values()
	out := make([]float64, 0, len(vs))
	for i := 1; i < len(vs); i++ {
		d := ts[i].Sub(ts[i-1]).Seconds()
		if d <= 0 {
			continue
		}
		out = append(out, max(0, vs[i]-vs[i-1])/d)
	}
	return out
}

type sampler struct {
	cl     *cluster
	mu     sync.Mutex
	topics map[string]*ring
	groups map[string]*ring
}

func newSampler(cl *cluster) *sampler {
	return &sampler{cl: cl, topics: map[string]*ring{}, groups: map[string]*ring{}}
}

func (s *sampler) run(ctx context.Context) {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for i := 0; ; i++ {
		s.sample(ctx, i%groupSampleEvery == 0)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *sampler) sample(ctx context.Context, groups bool) {
	ctx, cancel := context.WithTimeout(ctx, sampleEvery)
	defer cancel()
	now := time.Now()
	if ts, err := s.cl.topicSummaries(ctx); err == nil {
		s.mu.Lock()
		for _, t := range ts {
			r := s.topics[t.Topic]
			if r == nil {
				if len(s.topics) >= maxSampledTopics {
					continue
				}
				r = &ring{}
				s.topics[t.Topic] = r
			}
			r.add(now, float64(t.MaxOffsets))
		}
		s.mu.Unlock()
	}
	if !groups || s.cl.zk == nil {
		return
	}
	names, err := s.cl.zk.Groups(ctx)
	if err != nil {
		return
	}
	for _, g := range names {
		s.mu.Lock()
		r := s.groups[g]
		if r == nil && len(s.groups) < maxSampledGroups {
			r = &ring{}
			s.groups[g] = r
		}
		s.mu.Unlock()
		if r == nil {
			continue
		}
		gv, err := s.cl.groupView(ctx, g)
		if err != nil {
			continue
		}
		s.mu.Lock()
		r.add(time.Now(), float64(gv.Lag))
		s.mu.Unlock()
	}
}

// topicRates returns a topic's messages-in rates, oldest first.
func (s *sampler) topicRates(topic string) []float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.topics[topic]; r != nil {
		return r.rates()
	}
	return []float64{}
}

// groupLag returns a group's total lag samples, oldest first.
func (s *sampler) groupLag(group string) []float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.groups[group]; r != nil {
		_, v := r.values()
		return v
	}
	return []float64{}
}
