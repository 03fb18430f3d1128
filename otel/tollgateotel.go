package tollgateotel

import (
	"context"
	"errors"
	"fmt"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/otel/internal/tally"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ScopeName is the instrumentation scope of the instruments: the module's
// path.
const ScopeName = "github.com/tollgate-go/tollgate/otel"

// DefaultCardinalityLimit is the number of (plan, policy, route) attribute
// sets a Metrics keeps unless WithCardinalityLimit says otherwise.
const DefaultCardinalityLimit = 1000

// A StatsReporter is a store that counts the keys it holds and evicts, as
// memory.Store does. Given with WithStore or WithFallbackStore, it is
// reported as tollgate.store.keys, tollgate.store.evictions and
// tollgate.store.drained_evictions.
type StatsReporter interface {
	Stats() memory.Stats
}

// A BreakerReporter is a store with a circuit breaker that reports it,
// reported as tollgate.store.breaker.state and
// tollgate.store.breaker.opens.
type BreakerReporter interface {
	// BreakerState returns the breaker's state, "closed", "open" or
	// "half_open" (letting a probe through), and how many times it has
	// opened since the store was made.
	BreakerState() (state string, opens uint64)
}

// A DenialCacheReporter is a store that answers some denials from a local
// cache, without a round trip, and counts those answers; reported as
// tollgate.store.denial_cache.answers.
type DenialCacheReporter interface {
	DenialCacheAnswers() uint64
}

// A Metrics counts the decisions of the Limiters it observes and reports
// them, with the figures of the stores it was given, through OpenTelemetry
// instruments. Attach it to Limiters with tollgate.WithObserver. Build one
// with New; the zero Metrics is not usable. A Metrics is safe for
// concurrent use.
type Metrics struct {
	tally          *tally.Tally
	stores         []tally.Store
	latency, delay metric.Float64Histogram
	registration   metric.Registration

	decisions, tokens, storeErrors, resolverErrors, fallback, overflow metric.Int64ObservableCounter
	evictions, drained, breakerOpens, denialAnswers                    metric.Int64ObservableCounter
	keys                                                               metric.Int64ObservableUpDownCounter
	breakerState                                                       metric.Int64ObservableGauge
}

var _ tollgate.Observer = (*Metrics)(nil)

// An Option configures a Metrics. Options may come in any order.
type Option func(*config)

type config struct {
	tally.Options
	provider metric.MeterProvider
}

// WithMeterProvider sets the MeterProvider that makes the instruments
// (default: otel.GetMeterProvider(), the global one).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp == nil {
			c.Errs = append(c.Errs, errors.New("tollgateotel: WithMeterProvider: the provider is nil"))
			return
		}
		c.provider = mp
	}
}

// WithStore reports the figures of the Limiter's store, if it reports any
// (StatsReporter, BreakerReporter, DenialCacheReporter), with the
// attribute store="main".
func WithStore(s tollgate.Store) Option {
	return withStore("main", "WithStore", s)
}

// WithFallbackStore reports the figures of the store given to the Limiter
// with tollgate.WithFallbackStore, with the attribute store="fallback".
func WithFallbackStore(s tollgate.Store) Option {
	return withStore("fallback", "WithFallbackStore", s)
}

func withStore(name, option string, s tollgate.Store) Option {
	return func(c *config) {
		c.AddStore("tollgateotel", option, name, s)
	}
}

// WithCardinalityLimit bounds the (plan, policy, route) attribute sets of
// tollgate.decisions (default DefaultCardinalityLimit; n >= 1), each of
// which has a point per outcome. Past n, decisions of a new set are
// counted with the route "other"; past n + n/4 (plans made per tenant,
// say), with every attribute "other". tollgate.label.overflow counts the
// decisions so folded: it should stay at 0.
func WithCardinalityLimit(n int) Option {
	return func(c *config) { c.Limit = n }
}

// WithStoreTimeout tells the Metrics the store timeout given to the
// Limiter with tollgate.WithStoreTimeout (default
// tollgate.DefaultStoreTimeout), so that the bucket boundaries advised for
// tollgate.store.latency bracket it: timeout/2000 to twice the timeout,
// with half the timeout and the timeout among them.
func WithStoreTimeout(d time.Duration) Option {
	return func(c *config) { c.StoreTimeout = d }
}

// New returns a Metrics configured by opts, its instruments made by the
// MeterProvider. It fails on invalid options, naming them, and if the
// provider fails to make an instrument.
func New(opts ...Option) (*Metrics, error) {
	cfg := config{Options: tally.Options{Limit: DefaultCardinalityLimit, StoreTimeout: tollgate.DefaultStoreTimeout}}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if err := cfg.Err("tollgateotel"); err != nil {
		return nil, err
	}
	if cfg.provider == nil {
		cfg.provider = otel.GetMeterProvider()
	}
	m := &Metrics{tally: tally.New(cfg.Limit, cfg.StoreTimeout, false)}
	for _, s := range cfg.Stores {
		if s.Reports() {
			m.stores = append(m.stores, s)
		}
	}
	if err := m.instruments(cfg.provider.Meter(ScopeName), cfg.StoreTimeout); err != nil {
		return nil, fmt.Errorf("tollgateotel: %w", err)
	}
	return m, nil
}

// instruments makes the instruments and registers the callback that reads
// the asynchronous ones.
func (m *Metrics) instruments(meter metric.Meter, storeTimeout time.Duration) error {
	var errs []error
	counter := func(name, unit, help string) metric.Int64ObservableCounter {
		c, err := meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(help))
		errs = append(errs, err)
		return c
	}
	histogram := func(name, help string, bounds []float64) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(help),
			metric.WithExplicitBucketBoundaries(bounds...))
		errs = append(errs, err)
		return h
	}
	m.decisions = counter("tollgate.decisions", "{decision}", "Rate-limit decisions, by plan, the policy closest to denying, route pattern and outcome.")
	m.tokens = counter("tollgate.tokens.spent", "{token}", "Tokens taken by allowed and delayed decisions, by plan and route pattern.")
	m.storeErrors = counter("tollgate.store.errors", "{error}", "Decisions whose store failed, by kind of failure.")
	m.resolverErrors = counter("tollgate.resolver.errors", "{error}", "Decisions whose plan could not be resolved.")
	m.fallback = counter("tollgate.fallback.decisions", "{decision}", "Decisions made by the fallback store while the store failed, by outcome.")
	m.overflow = counter("tollgate.label.overflow", "{decision}", "Decisions counted under route \"other\" because the cardinality limit was reached.")
	m.evictions = counter("tollgate.store.evictions", "{key}", "Keys the store dropped before they were full, to honour its key cap.")
	m.drained = counter("tollgate.store.drained_evictions", "{key}", "Evictions of keys of tenants throttled or close to it, whom an eviction hands a full bucket.")
	m.breakerOpens = counter("tollgate.store.breaker.opens", "{opening}", "Times the store's circuit breaker opened.")
	m.denialAnswers = counter("tollgate.store.denial_cache.answers", "{decision}", "Decisions the store answered from its local denial cache, without a round trip.")
	var err error
	m.keys, err = meter.Int64ObservableUpDownCounter("tollgate.store.keys", metric.WithUnit("{key}"), metric.WithDescription("Keys (buckets) the store holds."))
	errs = append(errs, err)
	m.breakerState, err = meter.Int64ObservableGauge("tollgate.store.breaker.state", // no unit: "1" would be _ratio in Prometheus
		metric.WithDescription("1 for the state the store's circuit breaker is in, 0 for the others."))
	errs = append(errs, err)
	m.latency = histogram("tollgate.store.latency", "Time the store took to answer a decision, or to fail.", seconds(tally.LatencyBounds(storeTimeout)))
	m.delay = histogram("tollgate.delay", "Waits imposed on delayed decisions (reservations).", seconds(tally.DelayBounds))
	if err := errors.Join(errs...); err != nil {
		return err
	}
	m.registration, err = meter.RegisterCallback(m.observe, m.decisions, m.tokens, m.storeErrors, m.resolverErrors,
		m.fallback, m.overflow, m.evictions, m.drained, m.breakerOpens, m.denialAnswers, m.keys, m.breakerState)
	return err
}

func seconds(bounds []time.Duration) []float64 {
	s := make([]float64, len(bounds))
	for i, d := range bounds {
		s[i] = d.Seconds()
	}
	return s
}

// Observe counts the decision o; a Limiter calls it through
// tollgate.WithObserver. The counters take no lock and no allocation once
// o's plan, policy and route have been seen; the histograms cost what the
// SDK's Record does.
func (m *Metrics) Observe(ctx context.Context, o tollgate.Observation) {
	m.tally.Observe(&o)
	if tally.StoreCalled(&o) {
		m.latency.Record(ctx, o.StoreLatency.Seconds())
	}
	if o.Outcome == tollgate.OutcomeDelayed {
		m.delay.Record(ctx, o.Delay.Seconds())
	}
}

// Close unregisters the asynchronous instruments' callback: the
// MeterProvider stops reading the Metrics, and no longer holds it.
func (m *Metrics) Close() error {
	return m.registration.Unregister()
}

// observe reports the asynchronous instruments; the MeterProvider calls it
// when it collects.
func (m *Metrics) observe(_ context.Context, o metric.Observer) error {
	count := func(c metric.Int64Observable, n uint64, attrs ...attribute.KeyValue) {
		o.ObserveInt64(c, int64(min(n, 1<<63-1)), metric.WithAttributes(attrs...))
	}
	m.tally.Decisions(func(l tally.Labels, oc tollgate.Outcome, n uint64) {
		count(m.decisions, n, attribute.String("plan", l.Plan), attribute.String("policy", l.Policy),
			attribute.String("route", l.Route), attribute.String("outcome", oc.String()))
	})
	m.tally.Tokens(func(plan, route string, n uint64) {
		count(m.tokens, n, attribute.String("plan", plan), attribute.String("route", route))
	})
	m.tally.StoreErrors(func(kind string, n uint64) {
		count(m.storeErrors, n, attribute.String("kind", kind))
	})
	count(m.resolverErrors, m.tally.ResolverErrors())
	for _, oc := range tally.FallbackOutcomes {
		count(m.fallback, m.tally.Fallback(oc), attribute.String("outcome", oc.String()))
	}
	count(m.overflow, m.tally.Overflow())
	for _, s := range m.stores {
		f := s.Read()
		store := attribute.String("store", f.Name)
		if f.HasStats {
			o.ObserveInt64(m.keys, int64(f.Keys), metric.WithAttributes(store))
			count(m.evictions, f.Evictions, store)
			count(m.drained, f.DrainedEvictions, store)
		}
		if f.HasBreaker {
			for _, state := range tally.BreakerStates {
				var v int64
				if state == f.BreakerState {
					v = 1
				}
				o.ObserveInt64(m.breakerState, v, metric.WithAttributes(store, attribute.String("state", state)))
			}
			count(m.breakerOpens, f.BreakerOpens, store)
		}
		if f.HasDenialCache {
			count(m.denialAnswers, f.DenialCacheAnswers, store)
		}
	}
	return nil
}
