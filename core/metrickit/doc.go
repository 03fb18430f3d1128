// Package metrickit is for authors of metrics exporters: it counts a
// Limiter's decisions and names what the exporters export, for
// tollgateprom and tollgateotel alike: plain atomic counters per label
// set, found without a lock or an allocation, read only when the metrics
// library scrapes or collects. So an allowed decision costs a hash, a probe
// and one or two atomic adds, whatever the library.
//
// Applications never import it. Each exporter keeps only what is its
// library's own: how a Metric becomes a Prometheus description or an
// OpenTelemetry instrument.
package metrickit
