package memory_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/storekit"
)

// benchLimit never denies within a run, and keeps every tenant of a run
// tracked: a burst of a billion, refilled at 100 a second.
var benchLimit = tollgate.Limit{Rate: 100, Burst: 1e9}

// BenchmarkTake is one goroutine taking a token of one tracked tenant.
func BenchmarkTake(b *testing.B) {
	s := memory.New()
	defer s.Close()
	ctx := context.Background()
	s.Take(ctx, "tenant-0", benchLimit, 1)
	key := strings.Clone("tenant-0")
	b.ReportAllocs()
	for b.Loop() {
		s.Take(ctx, key, benchLimit, 1)
	}
}

// BenchmarkTakeParallel is GOMAXPROCS goroutines taking tokens of 10,000
// tracked tenants, each walking them from its own start.
func BenchmarkTakeParallel(b *testing.B) {
	s := memory.New()
	defer s.Close()
	ctx := context.Background()
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprint("tenant-", i)
		s.Take(ctx, keys[i], benchLimit, 1)
		keys[i] = strings.Clone(keys[i])
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := rand.IntN(len(keys))
		for pb.Next() {
			s.Take(ctx, keys[i], benchLimit, 1)
			if i++; i == len(keys) {
				i = 0
			}
		}
	})
}

// BenchmarkDo is a Limiter's Ops on one tracked tenant: the main bucket
// alone, and the main bucket with a daily quota and a budget, at a time
// the caller has read.
func BenchmarkDo(b *testing.B) {
	s := memory.New()
	defer s.Close()
	ctx := context.Background()
	main := storekit.BucketRule(benchLimit.Rate, benchLimit.Burst)
	budget := main
	budget.Name = "b:reports"
	q := tollgate.Quota{Tokens: 1e12, Period: tollgate.Daily}
	day := storekit.Rule{Kind: storekit.Quota, Name: "day", Burst: q.Tokens, Period: q.Bounds}
	for _, c := range []struct {
		name  string
		rules []storekit.Rule
	}{{"rules=1", []storekit.Rule{main}}, {"rules=3", []storekit.Rule{main, day, budget}}} {
		b.Run(c.name, func(b *testing.B) {
			op := &storekit.Op{Kind: storekit.Take, Tenant: "tenant-0", Rules: c.rules, Cost: 1, Results: make([]storekit.Result, 0, 4)}
			b.ReportAllocs()
			for b.Loop() {
				op.Now = time.Now()
				s.Do(ctx, op)
			}
		})
	}
}

// BenchmarkDoInFlight is a request that holds a slot of a cap on requests
// in flight, as a Limiter makes it: a Take of the main bucket and the cap,
// then the Release of its lease, at a time the caller has read.
func BenchmarkDoInFlight(b *testing.B) {
	s := memory.New()
	defer s.Close()
	ctx := context.Background()
	c := storekit.Rule{Kind: storekit.InFlight, Name: "inflight", Burst: 100}
	take := &storekit.Op{Kind: storekit.Take, Tenant: "tenant-0", Rules: []storekit.Rule{storekit.BucketRule(benchLimit.Rate, benchLimit.Burst), c},
		Cost: 1, LeaseTTL: 10 * time.Second, Results: make([]storekit.Result, 0, 4)}
	release := &storekit.Op{Kind: storekit.Release, Tenant: "tenant-0", Rules: []storekit.Rule{c}, Results: make([]storekit.Result, 0, 4)}
	leases := make([]string, 1024)
	for i := range leases {
		leases[i] = fmt.Sprintf("%032x", i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		take.Now, take.Lease = time.Now(), leases[i%len(leases)]
		release.Now, release.Lease = take.Now, take.Lease
		i++
		s.Do(ctx, take)
		s.Do(ctx, release)
	}
}

// BenchmarkTakeSerial10k is one goroutine taking tokens of 10,000 tracked
// tenants in turn.
func BenchmarkTakeSerial10k(b *testing.B) {
	s := memory.New()
	defer s.Close()
	ctx := context.Background()
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprint("tenant-", i)
		s.Take(ctx, keys[i], benchLimit, 1)
		keys[i] = strings.Clone(keys[i])
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s.Take(ctx, keys[i], benchLimit, 1)
		if i++; i == len(keys) {
			i = 0
		}
	}
}
