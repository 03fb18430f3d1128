package bench

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
)

// How the Wait benchmarks are read (docs/waiting.md has the command and
// the numbers): a Wait whose tokens are there must cost about what a Take
// costs, since a worker calls it before every job. Each case takes a token
// per call from a burst that no run drains (memDrainingLimit), so that
// Wait never sleeps: the measured path is the reservation that turns out
// to need no wait. x/time/rate's Limiter, the in-process Wait that users
// would otherwise pick, runs beside it, Allow against Wait.

// A waitCase is one way of asking for a token: op is take (tollgate's
// Take, x/time/rate's Allow), wait (Wait without a deadline) or
// wait-deadline (Wait with a context that has one, as a job with a time
// budget has).
type waitCase struct {
	lib, op string
	call    func(key string)
}

// waitCases returns the cases over a fresh tollgate Limiter on the memory
// store and a fresh x/time/rate Limiter, with every key of keys known to
// the store already.
func waitCases(b *testing.B, keys []string) []waitCase {
	store := memory.New()
	b.Cleanup(func() { store.Close() })
	plan := tollgate.Plan{Name: "bench", Limit: memDrainingLimit}
	l, err := tollgate.New(store, tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	deadlined, cancel := context.WithTimeout(ctx, time.Hour)
	b.Cleanup(cancel)
	for _, k := range keys {
		if d, err := l.Take(ctx, tollgate.Request{Tenant: k}); err != nil || !d.Allowed {
			b.Fatalf("warming %q: %+v, %v", k, d, err)
		}
	}
	must := func(d tollgate.Decision, err error) {
		if err != nil || !d.Allowed || d.Delay != 0 {
			b.Fatalf("a request that should pass at once: %+v, %v", d, err)
		}
	}
	x := rate.NewLimiter(rate.Limit(memDrainingLimit.Rate), int(memDrainingLimit.Burst))
	return []waitCase{
		{"tollgate", "take", func(k string) { must(l.Take(ctx, tollgate.Request{Tenant: k})) }},
		{"tollgate", "wait", func(k string) { must(l.Wait(ctx, tollgate.Request{Tenant: k})) }},
		{"tollgate", "wait-deadline", func(k string) { must(l.Wait(deadlined, tollgate.Request{Tenant: k})) }},
		{"x-time-rate", "take", func(string) {
			if !x.Allow() {
				b.Fatal("x/time/rate denied")
			}
		}},
		{"x-time-rate", "wait", func(string) {
			if err := x.Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}},
		{"x-time-rate", "wait-deadline", func(string) {
			if err := x.Wait(deadlined); err != nil {
				b.Fatal(err)
			}
		}},
	}
}

// BenchmarkWait measures each case serially, on one hot tenant (hotkey)
// and over 10,000 tenants (keys10k; x/time/rate has one limiter for all,
// so it runs the hot key only). Compare ops with benchstat -col /op.
func BenchmarkWait(b *testing.B) {
	hot := memTenantKeys(1)
	keys := memTenantKeys(10_000)
	for _, keyCase := range []string{"hotkey", "keys10k"} {
		for _, c := range waitCases(b, append(hot, keys...)) {
			if keyCase == "keys10k" && c.lib != "tollgate" {
				continue
			}
			b.Run("case="+keyCase+"/lib="+c.lib+"/op="+c.op, func(b *testing.B) {
				hotKey := strings.Clone(hot[0])
				clones := memCloneKeys(keys)
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					if keyCase == "hotkey" {
						c.call(hotKey)
					} else {
						c.call(clones[i%len(clones)])
					}
				}
			})
		}
	}
}

// BenchmarkWaitPaired runs BenchmarkWait's cases in turn within each
// iteration, in blocks of memPairedBlock calls (the order rotating), so
// that all run under the same load on a shared machine. It reports the
// median over the blocks of each case's time per call,
// <case>-<lib>-<op>-ns/op, and from the medians the ratio of a Wait to a
// Take (x/time/rate: to an Allow), <case>-<lib>-wait/take and
// <case>-<lib>-wait-deadline/take.
func BenchmarkWaitPaired(b *testing.B) {
	hot := memTenantKeys(1)
	keys := memTenantKeys(10_000)
	cs := waitCases(b, append(hot, keys...))
	hotKey := strings.Clone(hot[0])
	clones := memCloneKeys(keys)
	samples := map[string][]float64{}
	next := 0
	b.ResetTimer()
	for i := range b.N {
		for j := range cs {
			c := cs[(i+j)%len(cs)]
			name := "-" + c.lib + "-" + c.op
			start := time.Now()
			for range memPairedBlock {
				c.call(hotKey)
			}
			samples["hotkey"+name] = append(samples["hotkey"+name], float64(time.Since(start))/memPairedBlock)
			if c.lib != "tollgate" {
				continue // one limiter for every key
			}
			start = time.Now()
			for n := range memPairedBlock {
				c.call(clones[(next+n)%len(clones)])
			}
			samples["keys10k"+name] = append(samples["keys10k"+name], float64(time.Since(start))/memPairedBlock)
		}
		next = (next + memPairedBlock) % len(clones)
	}
	b.StopTimer()
	median := map[string]float64{}
	for name, v := range samples {
		slices.Sort(v)
		median[name] = v[len(v)/2]
		b.ReportMetric(median[name], name+"-ns/op")
	}
	for _, c := range []string{"hotkey-tollgate", "keys10k-tollgate", "hotkey-x-time-rate"} {
		for _, op := range []string{"wait", "wait-deadline"} {
			b.ReportMetric(median[c+"-"+op]/median[c+"-take"], c+"-"+op+"/take")
		}
	}
}
