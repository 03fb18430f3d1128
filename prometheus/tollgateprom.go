package tollgateprom

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/metrickit"
)

// DefaultCardinalityLimit is the number of (plan, policy, route) label sets
// a Collector keeps unless WithCardinalityLimit says otherwise.
const DefaultCardinalityLimit = metrickit.DefaultCardinalityLimit

// A Collector counts the decisions of the Limiters it observes and exports
// them, with the statistics of the stores it was given, to Prometheus.
// Attach it to Limiters with tollgate.WithObserver and register it once.
// Build one with New; the zero Collector is not usable. A Collector is
// safe for concurrent use.
type Collector struct {
	tally *metrickit.Tally
	descs map[*metrickit.Metric]*prometheus.Desc
}

var (
	_ tollgate.Observer    = (*Collector)(nil)
	_ prometheus.Collector = (*Collector)(nil)
)

// An Option configures a Collector. Options may come in any order.
type Option func(*config)

type config struct{ metrickit.Options }

// WithStore reports the statistics of the Limiter's store, if it keeps any
// (both of tollgate's stores do), with the label store="main":
// tollgate_store_tenants, tollgate_store_evictions_total,
// tollgate_store_drained_evictions_total, tollgate_store_breaker_state and
// tollgate_store_breaker_opens_total. A figure the store does not keep
// stays 0.
func WithStore(s tollgate.Store) Option {
	return func(c *config) { c.AddStore("WithStore", "main", s) }
}

// WithFallbackStore reports the statistics of the store given to the
// Limiter with tollgate.WithFallback, as WithStore does, with the label
// store="fallback".
func WithFallbackStore(s tollgate.Store) Option {
	return func(c *config) { c.AddStore("WithFallbackStore", "fallback", s) }
}

// WithCardinalityLimit bounds the (plan, policy, route) label sets of
// tollgate_decisions_total (default DefaultCardinalityLimit; n >= 1), each
// of which has a series per outcome. Past n, decisions of a new label set
// are counted with the route "other"; past n + n/4 (plans made per
// tenant, say), with every label "other". tollgate_label_overflow_total
// counts the decisions so folded: it should stay at 0.
func WithCardinalityLimit(n int) Option {
	return func(c *config) { c.Limit = n }
}

// WithStoreTimeout tells the Collector the timeout of the Limiter's store
// (default 50 ms, the Redis store's default), so that the buckets of
// tollgate_store_latency_seconds bracket it: timeout/2000 to twice the
// timeout, with half the timeout and the timeout among them.
func WithStoreTimeout(d time.Duration) Option {
	return func(c *config) { c.StoreTimeout = d }
}

// New returns a Collector configured by opts. It fails on invalid options,
// naming them.
func New(opts ...Option) (*Collector, error) {
	cfg := config{metrickit.NewOptions("tollgateprom")}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	t, err := metrickit.New(cfg.Options, true)
	if err != nil {
		return nil, err
	}
	c := &Collector{tally: t, descs: map[*metrickit.Metric]*prometheus.Desc{}}
	for _, m := range metrickit.Metrics {
		c.descs[m] = prometheus.NewDesc(m.Prometheus, m.Help, m.Labels, nil)
	}
	return c, nil
}

// Observe counts the decision d; a Limiter calls it through
// tollgate.WithObserver. It neither locks nor allocates once d's plan,
// policy and route have been seen.
func (c *Collector) Observe(_ context.Context, d *tollgate.Decision) {
	c.tally.Observe(d)
}

// ReportSlots makes the Collector export tollgate_inflight_slots: the slots
// of in-flight policies (tollgate.Policy.InFlight) that l's requests hold
// when Prometheus scrapes, by plan, added up over every Limiter reported.
// Call it once for each Limiter that the Collector observes; a plan whose
// slots all came back shows 0.
func (c *Collector) ReportSlots(l *tollgate.Limiter) { c.tally.AddLimiter(l) }

// Describe sends the descriptions of every metric the Collector may export.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range metrickit.Metrics {
		ch <- c.descs[m]
	}
}

// Collect sends the current value of every metric.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.tally.Collect(func(m *metrickit.Metric, v uint64, labels ...string) {
		kind := prometheus.CounterValue
		if m.Kind != metrickit.Counter {
			kind = prometheus.GaugeValue
		}
		desc := c.descs[m]
		pm, err := prometheus.NewConstMetric(desc, kind, float64(v), labels...)
		if err != nil {
			pm = prometheus.NewInvalidMetric(desc, err)
		}
		ch <- pm
	})
	ch <- c.histogram(metrickit.StoreLatency, c.tally.Latency())
	ch <- c.histogram(metrickit.Delay, c.tally.Delay())
}

func (c *Collector) histogram(m *metrickit.Metric, s metrickit.Snapshot) prometheus.Metric {
	buckets := make(map[float64]uint64, len(s.Bounds))
	for i, b := range s.Bounds {
		buckets[b] = s.Cumulative[i]
	}
	pm, err := prometheus.NewConstHistogram(c.descs[m], s.Count, s.Sum, buckets)
	if err != nil {
		return prometheus.NewInvalidMetric(c.descs[m], err)
	}
	return pm
}
