package tollgateprom

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/prometheus/internal/tally"
)

// DefaultCardinalityLimit is the number of (plan, policy, route) label sets
// a Collector keeps unless WithCardinalityLimit says otherwise.
const DefaultCardinalityLimit = 1000

// A StatsReporter is a store that counts the keys it holds and evicts, as
// memory.Store does. Given with WithStore or WithFallbackStore, it is
// reported as tollgate_store_keys, tollgate_store_evictions_total and
// tollgate_store_drained_evictions_total.
type StatsReporter interface {
	Stats() memory.Stats
}

// A BreakerReporter is a store with a circuit breaker that reports it,
// reported as tollgate_store_breaker_state and
// tollgate_store_breaker_opens_total.
type BreakerReporter interface {
	// BreakerState returns the breaker's state, "closed", "open" or
	// "half_open" (letting a probe through), and how many times it has
	// opened since the store was made.
	BreakerState() (state string, opens uint64)
}

// A DenialCacheReporter is a store that answers some denials from a local
// cache, without a round trip, and counts those answers; reported as
// tollgate_store_denial_cache_answers_total.
type DenialCacheReporter interface {
	DenialCacheAnswers() uint64
}

// A Collector counts the decisions of the Limiters it observes and exports
// them, with the figures of the stores it was given, to Prometheus. Attach
// it to Limiters with tollgate.WithObserver and register it once. Build
// one with New; the zero Collector is not usable. A Collector is safe for
// concurrent use.
type Collector struct {
	tally  *tally.Tally
	stores []tally.Store

	decisions, tokens, latency, storeErrors, resolverErrors, fallback, delay, overflow *prometheus.Desc
	keys, evictions, drained, breakerState, breakerOpens, denialAnswers                *prometheus.Desc
}

var (
	_ tollgate.Observer    = (*Collector)(nil)
	_ prometheus.Collector = (*Collector)(nil)
)

// An Option configures a Collector. Options may come in any order.
type Option func(*config)

type config struct{ tally.Options }

// WithStore reports the figures of the Limiter's store, if it reports any
// (StatsReporter, BreakerReporter, DenialCacheReporter), with the label
// store="main".
func WithStore(s tollgate.Store) Option {
	return withStore("main", "WithStore", s)
}

// WithFallbackStore reports the figures of the store given to the Limiter
// with tollgate.WithFallbackStore, with the label store="fallback".
func WithFallbackStore(s tollgate.Store) Option {
	return withStore("fallback", "WithFallbackStore", s)
}

func withStore(name, option string, s tollgate.Store) Option {
	return func(c *config) {
		c.AddStore("tollgateprom", option, name, s)
	}
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

// WithStoreTimeout tells the Collector the store timeout given to the
// Limiter with tollgate.WithStoreTimeout (default
// tollgate.DefaultStoreTimeout), so that the buckets of
// tollgate_store_latency_seconds bracket it: timeout/2000 to twice the
// timeout, with half the timeout and the timeout among them.
func WithStoreTimeout(d time.Duration) Option {
	return func(c *config) { c.StoreTimeout = d }
}

// New returns a Collector configured by opts. It fails on invalid options,
// naming them.
func New(opts ...Option) (*Collector, error) {
	cfg := config{Options: tally.Options{Limit: DefaultCardinalityLimit, StoreTimeout: tollgate.DefaultStoreTimeout}}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if err := cfg.Err("tollgateprom"); err != nil {
		return nil, err
	}
	c := &Collector{tally: tally.New(cfg.Limit, cfg.StoreTimeout, true)}
	for _, s := range cfg.Stores {
		if s.Reports() {
			c.stores = append(c.stores, s)
		}
	}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("tollgate_"+name, help, labels, nil)
	}
	c.decisions = desc("decisions_total", "Rate-limit decisions, by plan, the policy closest to denying, route pattern and outcome.", "plan", "policy", "route", "outcome")
	c.tokens = desc("tokens_spent_total", "Tokens taken by allowed and delayed decisions, by plan and route pattern.", "plan", "route")
	c.latency = desc("store_latency_seconds", "Time the store took to answer a decision, or to fail.")
	c.storeErrors = desc("store_errors_total", "Decisions whose store failed, by kind of failure.", "kind")
	c.resolverErrors = desc("resolver_errors_total", "Decisions whose plan could not be resolved.")
	c.fallback = desc("fallback_decisions_total", "Decisions made by the fallback store while the store failed, by outcome.", "outcome")
	c.delay = desc("delay_seconds", "Waits imposed on delayed decisions (reservations).")
	c.overflow = desc("label_overflow_total", "Decisions counted under route \"other\" because the cardinality limit was reached.")
	c.keys = desc("store_keys", "Keys (buckets) the store holds.", "store")
	c.evictions = desc("store_evictions_total", "Keys the store dropped before they were full, to honour its key cap.", "store")
	c.drained = desc("store_drained_evictions_total", "Evictions of keys of tenants throttled or close to it, whom an eviction hands a full bucket.", "store")
	c.breakerState = desc("store_breaker_state", "1 for the state the store's circuit breaker is in, 0 for the others.", "store", "state")
	c.breakerOpens = desc("store_breaker_opens_total", "Times the store's circuit breaker opened.", "store")
	c.denialAnswers = desc("store_denial_cache_answers_total", "Decisions the store answered from its local denial cache, without a round trip.", "store")
	return c, nil
}

// Observe counts the decision o; a Limiter calls it through
// tollgate.WithObserver. It neither locks nor allocates once o's plan,
// policy and route have been seen.
func (c *Collector) Observe(_ context.Context, o tollgate.Observation) {
	c.tally.Observe(&o)
}

// Describe sends the descriptions of every metric the Collector may export.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.decisions, c.tokens, c.latency, c.storeErrors, c.resolverErrors,
		c.fallback, c.delay, c.overflow, c.keys, c.evictions, c.drained, c.breakerState, c.breakerOpens, c.denialAnswers} {
		ch <- d
	}
}

// Collect sends the current value of every metric.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	send := func(desc *prometheus.Desc, kind prometheus.ValueType, v float64, labels ...string) {
		m, err := prometheus.NewConstMetric(desc, kind, v, labels...)
		if err != nil {
			m = prometheus.NewInvalidMetric(desc, err)
		}
		ch <- m
	}
	counter := prometheus.CounterValue
	c.tally.Decisions(func(l tally.Labels, o tollgate.Outcome, n uint64) {
		send(c.decisions, counter, float64(n), l.Plan, l.Policy, l.Route, o.String())
	})
	c.tally.Tokens(func(plan, route string, n uint64) {
		send(c.tokens, counter, float64(n), plan, route)
	})
	c.tally.StoreErrors(func(kind string, n uint64) {
		send(c.storeErrors, counter, float64(n), kind)
	})
	send(c.resolverErrors, counter, float64(c.tally.ResolverErrors()))
	for _, o := range tally.FallbackOutcomes {
		send(c.fallback, counter, float64(c.tally.Fallback(o)), o.String())
	}
	send(c.overflow, counter, float64(c.tally.Overflow()))
	ch <- histogram(c.latency, c.tally.Latency())
	ch <- histogram(c.delay, c.tally.Delay.Snapshot())
	for _, s := range c.stores {
		f := s.Read()
		if f.HasStats {
			send(c.keys, prometheus.GaugeValue, float64(f.Keys), f.Name)
			send(c.evictions, counter, float64(f.Evictions), f.Name)
			send(c.drained, counter, float64(f.DrainedEvictions), f.Name)
		}
		if f.HasBreaker {
			for _, state := range tally.BreakerStates {
				v := 0.0
				if state == f.BreakerState {
					v = 1
				}
				send(c.breakerState, prometheus.GaugeValue, v, f.Name, state)
			}
			send(c.breakerOpens, counter, float64(f.BreakerOpens), f.Name)
		}
		if f.HasDenialCache {
			send(c.denialAnswers, counter, float64(f.DenialCacheAnswers), f.Name)
		}
	}
}

func histogram(desc *prometheus.Desc, s tally.Snapshot) prometheus.Metric {
	buckets := make(map[float64]uint64, len(s.Bounds))
	for i, b := range s.Bounds {
		buckets[b] = s.Cumulative[i]
	}
	m, err := prometheus.NewConstHistogram(desc, s.Count, s.Sum, buckets)
	if err != nil {
		return prometheus.NewInvalidMetric(desc, err)
	}
	return m
}
