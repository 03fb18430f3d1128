package tollgateprom_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/metrickit"
	"github.com/tollgate-go/tollgate/core/metrickit/metrictest"
	tollgateprom "github.com/tollgate-go/tollgate/prometheus"
)

func newCollector(t *testing.T, opts ...tollgateprom.Option) *tollgateprom.Collector {
	t.Helper()
	c, err := tollgateprom.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestKnownMix(t *testing.T) {
	metrics := newCollector(t)
	metrictest.RunMix(t, metrics)
	got := gather(t, metrics)
	metrictest.Expect(t, got, name, metrictest.Mix)
	if n := metrictest.Sum(got, "tollgate_decisions_total"); n != metrictest.MixDecisions {
		t.Fatalf("%v decisions counted, want %d", n, metrictest.MixDecisions)
	}
}

// Label values from a misconfigured router (raw paths, invalid UTF-8, very
// long) still make valid metrics: the pedantic registry checks them.
func TestHostileRoutes(t *testing.T) {
	metrics := newCollector(t, tollgateprom.WithCardinalityLimit(8))
	l := metrictest.NewLimiter(t, metrictest.NewStore(), tollgate.WithObserver(metrics))
	long := "/" + strings.Repeat("a", 300)
	for i, route := range []string{long + "1", long + "2", "/\xff\xfe", "/\xfe"} {
		l.Take(context.Background(), tollgate.Request{Tenant: fmt.Sprint("t", i), Route: route})
	}
	for i := range 20 {
		l.Take(context.Background(), tollgate.Request{Tenant: "t", Route: fmt.Sprint("/users/", i)})
	}
	got := gather(t, metrics)
	metrictest.Expect(t, got, name, []metrictest.Sample{
		{Metric: metrickit.Decisions, Labels: []string{"small", "small", long[:metrickit.MaxLabelLength], "allowed"}, Value: 2},
		{Metric: metrickit.Decisions, Labels: []string{"small", "small", "/\uFFFD", "allowed"}, Value: 2},
		{Metric: metrickit.LabelOverflow, Value: 20 - 4}, // 4 hostile label sets and 4 of users: the limit
	})
}

func TestStoreStatistics(t *testing.T) {
	main, fallback, want := metrictest.StatsStores()
	metrics := newCollector(t, tollgateprom.WithStore(main), tollgateprom.WithFallbackStore(fallback))
	metrictest.Expect(t, gather(t, metrics), name, want)
	quiet := newCollector(t, tollgateprom.WithStore(metrictest.Quiet{Store: main}))
	for k := range gather(t, quiet) {
		if strings.HasPrefix(k, "tollgate_store_") && !strings.HasPrefix(k, "tollgate_store_latency") && !strings.HasPrefix(k, "tollgate_store_errors") {
			t.Errorf("%s reported for a store that keeps no statistics", k)
		}
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		opt  tollgateprom.Option
		want string
	}{
		{tollgateprom.WithCardinalityLimit(0), "WithCardinalityLimit"},
		{tollgateprom.WithStoreTimeout(-time.Second), "WithStoreTimeout"},
		{tollgateprom.WithStore(nil), "WithStore"},
		{tollgateprom.WithFallbackStore(nil), "WithFallbackStore"},
	} {
		if _, err := tollgateprom.New(tc.opt); err == nil || !strings.Contains(err.Error(), "tollgateprom: "+tc.want) {
			t.Errorf("New(%s): %v", tc.want, err)
		}
	}
	s := metrictest.NewStore()
	if _, err := tollgateprom.New(tollgateprom.WithStore(s), tollgateprom.WithStore(s)); err == nil {
		t.Error("New accepts two main stores")
	}
}

func TestLatencyBucketsFollowTheTimeout(t *testing.T) {
	metrics := newCollector(t, tollgateprom.WithStoreTimeout(200*time.Millisecond))
	store := metrictest.NewStore()
	store.SetLatency(120 * time.Millisecond)
	l := metrictest.NewLimiter(t, store, tollgate.WithObserver(metrics))
	l.Take(context.Background(), tollgate.Request{Tenant: "t"})
	metrictest.Expect(t, gather(t, metrics), name, []metrictest.Sample{
		{Metric: metrickit.StoreLatency, Suffix: "_bucket", Le: "0.0001", Value: 0}, // timeout/2000
		{Metric: metrickit.StoreLatency, Suffix: "_bucket", Le: "0.1", Value: 0},    // half the timeout
		{Metric: metrickit.StoreLatency, Suffix: "_bucket", Le: "0.2", Value: 1},    // the timeout
		{Metric: metrickit.StoreLatency, Suffix: "_bucket", Le: "0.4", Value: 1},
		{Metric: metrickit.StoreLatency, Suffix: "_sum", Value: 0.12},
	})
}

// Decisions counted while other goroutines scrape: run with -race.
func TestConcurrentDecisionsAndScrapes(t *testing.T) {
	metrics := newCollector(t, tollgateprom.WithCardinalityLimit(8))
	made, unresolved := metrictest.Concurrently(t, metrics, func() { gather(t, metrics) })
	got := gather(t, metrics)
	if n, calls := metrictest.Sum(got, "tollgate_decisions_total"), got[`tollgate_store_latency_seconds_count{}`]; n != float64(made) || calls != float64(made-unresolved) {
		t.Fatalf("%v decisions counted, %v latencies; want %d and %d", n, calls, made, made-unresolved)
	}
}
