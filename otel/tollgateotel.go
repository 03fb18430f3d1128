package tollgateotel

import (
	"context"
	"errors"
	"fmt"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/metrickit"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ScopeName is the instrumentation scope of the instruments: the module's
// path.
const ScopeName = "github.com/tollgate-go/tollgate/otel"

// DefaultCardinalityLimit is the number of (plan, policy, route) attribute
// sets a Metrics keeps unless WithCardinalityLimit says otherwise.
const DefaultCardinalityLimit = metrickit.DefaultCardinalityLimit

// A Metrics counts the decisions of the Limiters it observes and reports
// them, with the statistics of the stores it was given, through
// OpenTelemetry instruments. Attach it to Limiters with
// tollgate.WithObserver. Build one with New; the zero Metrics is not
// usable. A Metrics is safe for concurrent use.
type Metrics struct {
	tally          *metrickit.Tally
	latency, delay metric.Float64Histogram
	observables    map[*metrickit.Metric]metric.Int64Observable
	registration   metric.Registration
}

var _ tollgate.Observer = (*Metrics)(nil)

// An Option configures a Metrics. Options may come in any order.
type Option func(*config)

type config struct {
	metrickit.Options
	provider metric.MeterProvider
}

// WithStore reports the statistics of the Limiter's store, if it keeps any
// (both of tollgate's stores do), with the attribute store="main":
// tollgate.store.tenants, tollgate.store.evictions,
// tollgate.store.drained_evictions, tollgate.store.breaker.state and
// tollgate.store.breaker.opens. A figure the store does not keep stays 0.
func WithStore(s tollgate.Store) Option {
	return func(c *config) { c.AddStore("WithStore", "main", s) }
}

// WithFallbackStore reports the statistics of the store given to the
// Limiter with tollgate.WithFallback, as WithStore does, with the
// attribute store="fallback".
func WithFallbackStore(s tollgate.Store) Option {
	return func(c *config) { c.AddStore("WithFallbackStore", "fallback", s) }
}

// WithMeterProvider sets the MeterProvider that makes the instruments
// (default: otel.GetMeterProvider(), the global one).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp == nil {
			c.Fail(errors.New("tollgateotel: WithMeterProvider: the provider is nil"))
			return
		}
		c.provider = mp
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

// WithStoreTimeout tells the Metrics the timeout of the Limiter's store
// (default 50 ms, the Redis store's default), so that the bucket
// boundaries advised for tollgate.store.latency bracket it: timeout/2000
// to twice the timeout, with half the timeout and the timeout among them.
func WithStoreTimeout(d time.Duration) Option {
	return func(c *config) { c.StoreTimeout = d }
}

// New returns a Metrics configured by opts, its instruments made by the
// MeterProvider. It fails on invalid options, naming them, and if the
// provider fails to make an instrument.
func New(opts ...Option) (*Metrics, error) {
	cfg := config{Options: metrickit.NewOptions("tollgateotel")}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	t, err := metrickit.New(cfg.Options, false)
	if err != nil {
		return nil, err
	}
	if cfg.provider == nil {
		cfg.provider = otel.GetMeterProvider()
	}
	m := &Metrics{tally: t, observables: map[*metrickit.Metric]metric.Int64Observable{}}
	if err := m.instruments(cfg.provider.Meter(ScopeName), cfg.StoreTimeout); err != nil {
		return nil, fmt.Errorf("tollgateotel: %w", err)
	}
	return m, nil
}

// instruments makes an instrument of each metrickit.Metric and registers the
// callback that reads the asynchronous ones.
func (m *Metrics) instruments(meter metric.Meter, storeTimeout time.Duration) error {
	var errs []error
	for _, tm := range metrickit.Metrics {
		var err error
		switch tm.Kind {
		case metrickit.Counter:
			m.observables[tm], err = meter.Int64ObservableCounter(tm.Name, metric.WithUnit(tm.Unit), metric.WithDescription(tm.Help))
		case metrickit.UpDownCounter:
			m.observables[tm], err = meter.Int64ObservableUpDownCounter(tm.Name, metric.WithUnit(tm.Unit), metric.WithDescription(tm.Help))
		case metrickit.Gauge: // no unit: "1" would be _ratio in Prometheus
			m.observables[tm], err = meter.Int64ObservableGauge(tm.Name, metric.WithDescription(tm.Help))
		}
		errs = append(errs, err)
	}
	histogram := func(tm *metrickit.Metric, bounds []time.Duration) metric.Float64Histogram {
		h, err := meter.Float64Histogram(tm.Name, metric.WithUnit(tm.Unit), metric.WithDescription(tm.Help),
			metric.WithExplicitBucketBoundaries(metrickit.Seconds(bounds)...))
		errs = append(errs, err)
		return h
	}
	m.latency = histogram(metrickit.StoreLatency, metrickit.LatencyBounds(storeTimeout))
	m.delay = histogram(metrickit.Delay, metrickit.DelayBounds)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	var observables []metric.Observable
	for _, o := range m.observables {
		observables = append(observables, o)
	}
	var err error
	m.registration, err = meter.RegisterCallback(m.observe, observables...)
	return err
}

// Observe counts the decision d; a Limiter calls it through
// tollgate.WithObserver. The counters take no lock and no allocation once
// d's plan, policy and route have been seen; the histograms cost what the
// SDK's Record does.
func (m *Metrics) Observe(ctx context.Context, d *tollgate.Decision) {
	m.tally.Observe(d)
	if metrickit.StoreCalled(d) {
		m.latency.Record(ctx, d.Latency.Seconds())
	}
	if d.Outcome() == "delayed" {
		m.delay.Record(ctx, d.Delay.Seconds())
	}
}

// ReportSlots makes the Metrics report tollgate.inflight.slots: the slots
// of in-flight policies (tollgate.Policy.InFlight) that l's requests hold
// when the MeterProvider collects, by plan, added up over every Limiter
// reported. Call it once for each Limiter that the Metrics observes; a
// plan whose slots all came back shows 0.
func (m *Metrics) ReportSlots(l *tollgate.Limiter) { m.tally.AddLimiter(l) }

// Close unregisters the asynchronous instruments' callback: the
// MeterProvider stops reading the Metrics, and no longer holds it.
func (m *Metrics) Close() error {
	return m.registration.Unregister()
}

// observe reports the asynchronous instruments; the MeterProvider calls it
// when it collects.
func (m *Metrics) observe(_ context.Context, o metric.Observer) error {
	m.tally.Collect(func(tm *metrickit.Metric, v uint64, labels ...string) {
		attrs := make([]attribute.KeyValue, len(labels))
		for i, l := range labels {
			attrs[i] = attribute.String(tm.Labels[i], l)
		}
		o.ObserveInt64(m.observables[tm], int64(min(v, 1<<63-1)), metric.WithAttributes(attrs...))
	})
	return nil
}
