package metrickit

// A Kind says what sort of instrument a Metric is.
type Kind uint8

const (
	// Counter only goes up.
	Counter Kind = iota + 1
	// Gauge is a state read whole: 1 for the state a breaker is in.
	Gauge
	// UpDownCounter is a count that goes up and down, such as the tenants
	// a store holds: a gauge in Prometheus.
	UpDownCounter
	// Histogram counts durations, in seconds.
	Histogram
)

// A Metric is one metric of both exporters, under both its names.
// OpenTelemetry's Prometheus exporter turns Name and Unit into Prometheus
// exactly, so that one dashboard serves either module.
type Metric struct {
	Name       string // the OpenTelemetry name: dotted, no unit, no _total
	Prometheus string // the Prometheus name: underscored, with the unit and _total
	Kind       Kind
	Unit       string // UCUM, for OpenTelemetry: "s", "{decision}"
	Help       string
	Labels     []string // label (attribute) names, in the order Collect gives their values
}

// The metrics. No label is a tenant: a metrics system keeps a series per
// label value, and tenants are unbounded.
var (
	Decisions = &Metric{"tollgate.decisions", "tollgate_decisions_total", Counter, "{decision}",
		"Rate-limit decisions, by plan, the policy closest to denying, route pattern and outcome.",
		[]string{"plan", "policy", "route", "outcome"}}
	Tokens = &Metric{"tollgate.tokens.spent", "tollgate_tokens_spent_total", Counter, "{token}",
		"Tokens taken by allowed and delayed decisions, by plan and route pattern.",
		[]string{"plan", "route"}}
	StoreLatency = &Metric{"tollgate.store.latency", "tollgate_store_latency_seconds", Histogram, "s",
		"Time the store waited on I/O to answer a decision, or to fail; 0 for an in-process store.", nil}
	StoreErrors = &Metric{"tollgate.store.errors", "tollgate_store_errors_total", Counter, "{error}",
		"Decisions whose store failed, by kind of failure.", []string{"kind"}}
	ResolverErrors = &Metric{"tollgate.resolver.errors", "tollgate_resolver_errors_total", Counter, "{error}",
		"Decisions whose plan could not be resolved.", nil}
	FallbackDecisions = &Metric{"tollgate.fallback.decisions", "tollgate_fallback_decisions_total", Counter, "{decision}",
		"Decisions made by the fallback store while the store failed, by outcome.", []string{"outcome"}}
	Delay = &Metric{"tollgate.delay", "tollgate_delay_seconds", Histogram, "s",
		"Waits imposed on delayed decisions (reservations).", nil}
	LabelOverflow = &Metric{"tollgate.label.overflow", "tollgate_label_overflow_total", Counter, "{decision}",
		"Decisions counted under route \"other\" because the cardinality limit was reached.", nil}
	StoreTenants = &Metric{"tollgate.store.tenants", "tollgate_store_tenants", UpDownCounter, "{tenant}",
		"Tenants whose state the store holds in the process.", []string{"store"}}
	StoreEvictions = &Metric{"tollgate.store.evictions", "tollgate_store_evictions_total", Counter, "{tenant}",
		"Tenants the store dropped before their state expired, to honour its cap.", []string{"store"}}
	StoreDrainedEvictions = &Metric{"tollgate.store.drained_evictions", "tollgate_store_drained_evictions_total", Counter, "{tenant}",
		"Evictions of tenants throttled or close to it, whom an eviction hands a full bucket.", []string{"store"}}
	BreakerState = &Metric{"tollgate.store.breaker.state", "tollgate_store_breaker_state", Gauge, "",
		"1 for the state the store's circuit breaker is in, 0 for the other.", []string{"store", "state"}}
	BreakerOpens = &Metric{"tollgate.store.breaker.opens", "tollgate_store_breaker_opens_total", Counter, "{opening}",
		"Times the store's circuit breaker opened.", []string{"store"}}
	Refusals = &Metric{"tollgate.refusals", "tollgate_refusals_total", Counter, "{request}",
		"Requests denied, by plan and the kind of the policy that denied them: bucket, quota or in-flight.",
		[]string{"plan", "policy_kind"}}
	InFlightSlots = &Metric{"tollgate.inflight.slots", "tollgate_inflight_slots", UpDownCounter, "{slot}",
		"Slots of in-flight policies that requests hold now, by plan, in the Limiters reported.", []string{"plan"}}
)

// Metrics lists every Metric, in the order the exporters describe them.
var Metrics = []*Metric{
	Decisions, Tokens, StoreLatency, StoreErrors, ResolverErrors, FallbackDecisions, Delay, LabelOverflow,
	StoreTenants, StoreEvictions, StoreDrainedEvictions, BreakerState, BreakerOpens,
	Refusals, InFlightSlots,
}

// BreakerStates are the values of BreakerState's label "state".
var BreakerStates = []string{"closed", "open"}

// Collect calls emit with the value of every series of every Counter,
// Gauge and UpDownCounter: the decisions counted and the figures of the
// stores, each with its label values in the order of the Metric's Labels.
// The histograms are the exporter's (see Latency and Delay).
func (t *Tally) Collect(emit func(m *Metric, v uint64, labels ...string)) {
	t.decisions(func(l Labels, outcome string, n uint64) {
		emit(Decisions, n, l.Plan, l.Policy, l.Route, outcome)
	})
	t.tokens(func(plan, route string, n uint64) { emit(Tokens, n, plan, route) })
	t.storeErrors(func(kind string, n uint64) { emit(StoreErrors, n, kind) })
	emit(ResolverErrors, t.resolverErrors.Load())
	for i, o := range fallbackOutcomes {
		emit(FallbackDecisions, t.fallback[i+1].Load(), o)
	}
	emit(LabelOverflow, t.overflow.Load())
	t.refusals(func(plan, kind string, n uint64) { emit(Refusals, n, plan, kind) })
	t.slotsHeld(func(plan string, n uint64) { emit(InFlightSlots, n, plan) })
	for _, s := range t.stores {
		st := s.stats.Stats()
		emit(StoreTenants, uint64(max(st.Tenants, 0)), s.name)
		emit(StoreEvictions, st.Evictions, s.name)
		emit(StoreDrainedEvictions, st.DrainedEvictions, s.name)
		emit(BreakerState, boolValue(!st.BreakerOpen), s.name, "closed")
		emit(BreakerState, boolValue(st.BreakerOpen), s.name, "open")
		emit(BreakerOpens, st.BreakerOpens, s.name)
	}
}

func boolValue(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
