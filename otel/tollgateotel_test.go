package tollgateotel_test

import (
	"context"
	"strings"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/metrickit"
	"github.com/tollgate-go/tollgate/core/metrickit/metrictest"
	tollgateotel "github.com/tollgate-go/tollgate/otel"
)

func TestKnownMix(t *testing.T) {
	metrics, reader := newMetrics(t)
	metrictest.RunMix(t, metrics)
	got := points(t, reader)
	metrictest.Expect(t, got, name, metrictest.Mix)
	if n := metrictest.Sum(got, metrickit.Decisions.Name); n != metrictest.MixDecisions {
		t.Fatalf("%v decisions counted, want %d", n, metrictest.MixDecisions)
	}
}

func TestLatencyBoundaries(t *testing.T) {
	metrics, reader := newMetrics(t)
	store := metrictest.NewStore()
	store.SetLatency(30 * time.Millisecond)
	l := metrictest.NewLimiter(t, store, tollgate.WithObserver(metrics))
	l.Take(context.Background(), tollgate.Request{Tenant: "t"})
	metrictest.Expect(t, points(t, reader), name, []metrictest.Sample{
		{Metric: metrickit.StoreLatency, Suffix: "_bucket", Le: "2.5e-05", Value: 0}, // timeout/2000
		{Metric: metrickit.StoreLatency, Suffix: "_bucket", Le: "0.025", Value: 0},   // half the default timeout
		{Metric: metrickit.StoreLatency, Suffix: "_bucket", Le: "0.05", Value: 1},    // the timeout
		{Metric: metrickit.StoreLatency, Suffix: "_bucket", Le: "0.1", Value: 1},
		{Metric: metrickit.StoreLatency, Suffix: "_count", Value: 1},
	})
}

func TestStoreStatistics(t *testing.T) {
	main, fallback, want := metrictest.StatsStores()
	_, reader := newMetrics(t, tollgateotel.WithStore(main), tollgateotel.WithFallbackStore(fallback))
	metrictest.Expect(t, points(t, reader), name, want)
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		opt  tollgateotel.Option
		want string
	}{
		{tollgateotel.WithCardinalityLimit(-1), "WithCardinalityLimit"},
		{tollgateotel.WithStoreTimeout(0), "WithStoreTimeout"},
		{tollgateotel.WithStore(nil), "WithStore"},
		{tollgateotel.WithFallbackStore(nil), "WithFallbackStore"},
		{tollgateotel.WithMeterProvider(nil), "WithMeterProvider"},
	} {
		if _, err := tollgateotel.New(tc.opt); err == nil || !strings.Contains(err.Error(), "tollgateotel: "+tc.want) {
			t.Errorf("New(%s): %v", tc.want, err)
		}
	}
}

// Decisions counted while the reader collects: run with -race.
func TestConcurrentDecisionsAndCollections(t *testing.T) {
	metrics, reader := newMetrics(t, tollgateotel.WithCardinalityLimit(8))
	made, unresolved := metrictest.Concurrently(t, metrics, func() { points(t, reader) })
	got := points(t, reader)
	if n, calls := metrictest.Sum(got, metrickit.Decisions.Name), got[`tollgate.store.latency_count{}`]; n != float64(made) || calls != float64(made-unresolved) {
		t.Fatalf("%v decisions, %v latencies; want %d and %d", n, calls, made, made-unresolved)
	}
}

func TestCloseStopsReporting(t *testing.T) {
	metrics, reader := newMetrics(t)
	l := metrictest.NewLimiter(t, metrictest.NewStore(), tollgate.WithObserver(metrics))
	l.Take(context.Background(), tollgate.Request{Tenant: "t"})
	if got := points(t, reader); got[`tollgate.decisions{outcome="allowed",plan="small",policy="small",route=""}`] != 1 {
		t.Fatalf("before Close: %v", got)
	}
	if err := metrics.Close(); err != nil {
		t.Fatal(err)
	}
	for k := range points(t, reader) {
		if strings.HasPrefix(k, "tollgate.decisions{") {
			t.Fatalf("after Close: %s", k)
		}
	}
}
