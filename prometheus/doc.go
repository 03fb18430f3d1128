// Package tollgateprom exports the decisions of tollgate Limiters as
// Prometheus metrics.
//
// A Collector is both a tollgate.Observer, attached to a Limiter with
// tollgate.WithObserver, and a prometheus.Collector, registered in one line:
//
//	metrics, err := tollgateprom.New(tollgateprom.WithStore(store))
//	limiter, err := tollgate.New(store, plans, tollgate.WithObserver(metrics))
//	metrics.ReportSlots(limiter) // the slots of in-flight policies held
//	prometheus.MustRegister(metrics)
//
// The metrics (all counters end in _total, all durations are in seconds):
//
//	tollgate_decisions_total{plan, policy, route, outcome}
//	tollgate_tokens_spent_total{plan, route}
//	tollgate_store_latency_seconds (histogram)
//	tollgate_store_errors_total{kind}
//	tollgate_resolver_errors_total
//	tollgate_fallback_decisions_total{outcome}
//	tollgate_delay_seconds (histogram)
//	tollgate_label_overflow_total
//	tollgate_store_tenants{store}, tollgate_store_evictions_total{store},
//	tollgate_store_drained_evictions_total{store}
//	tollgate_store_breaker_state{store, state}, tollgate_store_breaker_opens_total{store}
//	tollgate_refusals_total{plan, policy_kind}
//	tollgate_inflight_slots{plan} (with ReportSlots)
//
// No metric has a tenant label: a metrics system keeps a series per label
// value, and tenants are unbounded. Routes are the router's patterns (the
// Limiter's Request.Route), and a cardinality limit folds label sets past
// it into the route "other" anyway (WithCardinalityLimit).
//
// Counting a decision takes no lock and no allocation: the Collector keeps
// plain atomic counters per label set, found through a lock-free table,
// and turns them into metrics only when it is scraped. Package
// tollgateotel counts alike, with the same code, for OpenTelemetry.
package tollgateprom
