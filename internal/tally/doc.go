// Package tally counts a Limiter's decisions for the two metrics modules,
// tollgateprom and tollgateotel, and names what they export: plain atomic
// counters per label set, found without a lock or an allocation, read only
// when the metrics library scrapes or collects. So an allowed decision costs
// a hash, a probe and one or two atomic adds, whatever the library.
//
// The module is internal to tollgate: the exporters import it, users never
// do. Each exporter keeps only what is its library's own: how a Metric
// becomes a Prometheus description or an OpenTelemetry instrument.
package tally
