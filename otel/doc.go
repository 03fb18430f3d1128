// Package tollgateotel reports the decisions of tollgate Limiters through
// the OpenTelemetry metrics API, for applications that export metrics with
// OpenTelemetry rather than the Prometheus client.
//
// A Metrics is a tollgate.Observer, attached to a Limiter with
// tollgate.WithObserver:
//
//	metrics, err := tollgateotel.New(tollgateotel.WithStore(store)) // the global MeterProvider
//	limiter, err := tollgate.New(store, plans, tollgate.WithObserver(metrics))
//	metrics.ReportSlots(limiter) // the slots of in-flight policies held
//
// The instruments are those of tollgateprom, named the OpenTelemetry way:
// dot-separated, no unit in the name, no _total, units in UCUM
// ("s", "{decision}"). An OpenTelemetry Prometheus exporter turns each name
// into tollgateprom's (dots to underscores, the unit as a suffix, _total on
// counters), and the attributes are its labels:
//
//	tollgate.decisions            {decision}  counter    plan, policy, route, outcome
//	tollgate.tokens.spent         {token}     counter    plan, route
//	tollgate.store.latency        s           histogram
//	tollgate.store.errors         {error}     counter    kind
//	tollgate.resolver.errors      {error}     counter
//	tollgate.fallback.decisions   {decision}  counter    outcome
//	tollgate.delay                s           histogram
//	tollgate.label.overflow       {decision}  counter
//	tollgate.store.tenants        {tenant}    updowncounter  store
//	tollgate.store.evictions      {tenant}    counter    store
//	tollgate.store.drained_evictions  {tenant}  counter  store
//	tollgate.store.breaker.state  (none)      gauge      store, state
//	tollgate.store.breaker.opens  {opening}   counter    store
//	tollgate.refusals             {request}   counter    plan, policy_kind
//	tollgate.inflight.slots       {slot}      updowncounter  plan (with ReportSlots)
//
// No instrument has a tenant attribute, and a cardinality limit folds
// (plan, policy, route) sets past it into the route "other"
// (WithCardinalityLimit), as in tollgateprom.
//
// The counters are asynchronous: a decision adds to plain atomic counters,
// without a lock or an allocation, and the MeterProvider reads them when it
// collects. They are the counters of tollgateprom, the same code. The two
// histograms are synchronous (OpenTelemetry has no asynchronous
// histogram), so their cost per decision is the SDK's; a View that drops
// tollgate.store.latency removes it.
package tollgateotel
