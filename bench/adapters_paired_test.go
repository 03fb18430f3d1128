package bench

import (
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// adapterTenants is how many tenants every adapter benchmark walks, each
// tracked before the timer starts.
const adapterTenants = 10_000

func adapterTenantIDs() []string {
	tenants := make([]string, adapterTenants)
	for i := range tenants {
		tenants[i] = "tenant-" + strconv.Itoa(i)
	}
	return tenants
}

// adapterRequests returns a GET /api/hello for each tenant, naming it in
// X-Tenant-ID.
func adapterRequests(tenants []string) []*http.Request {
	reqs := make([]*http.Request, len(tenants))
	for i, t := range tenants {
		reqs[i] = httptest.NewRequest("GET", "/api/hello", nil)
		reqs[i].Header.Set("X-Tenant-ID", t)
	}
	return reqs
}

// An adapterCase is a middleware of one framework: none (a nil middleware,
// lib=bare), its usual limiter, or tollgate's adapter.
type adapterCase[M any] struct {
	name       string
	middleware func(b *testing.B) M
}

// build returns the case's middleware, or M's zero value for bare.
func (c adapterCase[M]) build(b *testing.B) M {
	var m M
	if c.middleware != nil {
		m = c.middleware(b)
	}
	return m
}

// httpServe returns serve, which serves request i through h (failing b
// unless the answer is 200), and hasHeaders, which reports whether the last
// answer carried rate-limit headers. One ResponseWriter is reused, its
// headers cleared between requests.
func httpServe(b *testing.B, h http.Handler, reqs []*http.Request) (serve func(i int), hasHeaders func() bool) {
	w := &discardWriter{header: make(http.Header)}
	serve = func(i int) {
		clear(w.header)
		w.status = 0
		h.ServeHTTP(w, reqs[i])
		if w.status != http.StatusOK {
			b.Fatalf("status %d for %s, want 200", w.status, reqs[i].Header.Get("X-Tenant-ID"))
		}
	}
	return serve, func() bool { return w.header.Get("X-Ratelimit-Remaining") != "" }
}

// fasthttpServe is httpServe for a fasthttp handler (Fiber's), with one
// reused RequestCtx.
func fasthttpServe(b *testing.B, h fasthttp.RequestHandler, tenants []string) (serve func(i int), hasHeaders func() bool) {
	var req fasthttp.Request
	req.Header.SetMethod(fasthttp.MethodGet)
	req.SetRequestURI("/api/hello")
	ctx := new(fasthttp.RequestCtx)
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}, nil)
	serve = func(i int) {
		ctx.Request.Header.Set("X-Tenant-ID", tenants[i])
		ctx.Response.Reset()
		h(ctx)
		if s := ctx.Response.StatusCode(); s != http.StatusOK {
			b.Fatalf("status %d for %s, want 200", s, tenants[i])
		}
	}
	return serve, func() bool { return len(ctx.Response.Header.Peek("X-Ratelimit-Remaining")) > 0 }
}

// warmAdapter serves every tenant once, so that each limiter tracks them
// all, and fails b if headers are expected and missing.
func warmAdapter(b *testing.B, serve func(int), headers bool, hasHeaders func() bool) {
	for i := range adapterTenants {
		serve(i)
	}
	if headers && !hasHeaders() {
		b.Fatal("no rate-limit headers written")
	}
}

// runAdapter times b.N requests through serve, walking the tenants in turn.
func runAdapter(b *testing.B, serve func(int), headers bool, hasHeaders func() bool) {
	warmAdapter(b, serve, headers, hasHeaders)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	i := 0
	for range b.N {
		serve(i)
		if i++; i == adapterTenants {
			i = 0
		}
	}
	reportCPU(b, cpu)
}

// A pairedLib is one case of a framework, ready to serve.
type pairedLib struct {
	name  string
	serve func(int)
}

// Blocks of the paired adapter benchmark: each iteration serves
// adapterPairedTurn blocks of adapterPairedBlock requests through every
// case in turn and counts all blocks but each turn's first, which runs on
// caches the other cases filled.
const (
	adapterPairedBlock = 64
	adapterPairedTurn  = 4
)

// BenchmarkAdapterPaired is the adapter benchmarks for a machine shared
// with other work: for each framework it serves short blocks of requests
// through the bare framework, its usual limiter and tollgate in turn within
// each iteration, so that all three run under the same load, and reports
// the median wall time per request of each (<lib>-ns/op), what each limiter
// adds over bare (<lib>-added-ns), and tollgate's addition over the usual
// limiter's (tollgate/usual). Run it with -benchtime=300x or so.
func BenchmarkAdapterPaired(b *testing.B) {
	tenants := adapterTenantIDs()
	reqs := adapterRequests(tenants)
	frameworks := []struct {
		name string
		libs func(b *testing.B) []pairedLib
	}{
		{"gin", func(b *testing.B) []pairedLib { return pairedHTTP(b, ginCases, ginRouter, reqs) }},
		{"chi", func(b *testing.B) []pairedLib { return pairedHTTP(b, chiCases, chiRouter, reqs) }},
		{"echo", func(b *testing.B) []pairedLib { return pairedHTTP(b, echoCases, echoRouter, reqs) }},
		{"echov5", func(b *testing.B) []pairedLib { return pairedHTTP(b, echov5Cases, echov5Router, reqs) }},
		{"fiber", func(b *testing.B) []pairedLib { return pairedFast(b, fiberCases, fiberHandler, tenants) }},
		{"fiberv3", func(b *testing.B) []pairedLib { return pairedFast(b, fiberv3Cases, fiberv3Handler, tenants) }},
	}
	for _, fw := range frameworks {
		b.Run("fw="+fw.name, func(b *testing.B) {
			libs := fw.libs(b)
			samples := make([][]float64, len(libs))
			next := 0
			b.ResetTimer()
			for i := range b.N {
				for j := range libs {
					l := (i + j) % len(libs)
					for t := range adapterPairedTurn {
						start := time.Now()
						for n := range adapterPairedBlock {
							libs[l].serve((next + n) % adapterTenants)
						}
						if t > 0 {
							samples[l] = append(samples[l], float64(time.Since(start))/adapterPairedBlock)
						}
					}
				}
				next = (next + adapterPairedTurn*adapterPairedBlock) % adapterTenants
			}
			b.StopTimer()
			medians := make([]float64, len(libs))
			for l, v := range samples {
				slices.Sort(v)
				medians[l] = v[len(v)/2]
				b.ReportMetric(medians[l], libs[l].name+"-ns/op")
				if l > 0 {
					b.ReportMetric(medians[l]-medians[0], libs[l].name+"-added-ns")
				}
			}
			// libs are bare, the usual limiter, tollgate.
			b.ReportMetric((medians[2]-medians[0])/(medians[1]-medians[0]), "tollgate/usual")
		})
	}
}

// pairedHTTP makes the cases of a net/http framework ready to serve.
func pairedHTTP[M any](b *testing.B, cases []adapterCase[M], router func(M) http.Handler, reqs []*http.Request) []pairedLib {
	var libs []pairedLib
	for _, c := range cases {
		serve, has := httpServe(b, router(c.build(b)), reqs)
		warmAdapter(b, serve, c.name != "bare" && c.name != "ratelimiter", has)
		libs = append(libs, pairedLib{c.name, serve})
	}
	return libs
}

// pairedFast is pairedHTTP for a fasthttp framework.
func pairedFast[M any](b *testing.B, cases []adapterCase[M], handler func(M) fasthttp.RequestHandler, tenants []string) []pairedLib {
	var libs []pairedLib
	for _, c := range cases {
		serve, has := fasthttpServe(b, handler(c.build(b)), tenants)
		warmAdapter(b, serve, c.name != "bare", has)
		libs = append(libs, pairedLib{c.name, serve})
	}
	return libs
}
