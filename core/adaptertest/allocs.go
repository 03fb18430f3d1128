package adaptertest

import (
	"context"
	"net/http"
	"testing"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adapterkit"
)

// AllocsPerRun is testing.AllocsPerRun, skipping t under the race
// detector, which allocates on its own account: run allocation tests
// without -race.
func AllocsPerRun(t *testing.T, runs int, f func()) float64 {
	t.Helper()
	if raceEnabled {
		t.Skip("the race detector allocates; run without -race")
	}
	return testing.AllocsPerRun(runs, f)
}

// CheckAllocs checks that an adapter allocates nothing of its own on the
// allowed path, beyond extra: limited, the framework with the adapter over
// l, may allocate per request what bare, the same framework without it,
// allocates, plus what l's decision and its response headers take by
// themselves (DecisionAllocs with adapterkit.WriteHeaders), plus extra. Both serve
// GET /x with a handler that writes only a status; the tenant is in the
// X-Tenant-ID header, and l must allow every request.
func CheckAllocs(t *testing.T, l *tollgate.Limiter, bare, limited http.Handler, extra float64) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(adapterkit.TenantHeader, "acme")
	w := &discard{header: make(http.Header)}
	serve := func(h http.Handler) func() {
		return func() {
			clear(w.header)
			h.ServeHTTP(w, req)
		}
	}
	decision := DecisionAllocs(t, l, func(d *tollgate.Decision) {
		clear(w.header)
		adapterkit.WriteHeaders(w.header, d)
	})
	base := AllocsPerRun(t, 200, serve(bare))
	got := AllocsPerRun(t, 200, serve(limited))
	if w.header.Get("X-RateLimit-Remaining") == "" || w.status != http.StatusOK {
		t.Fatalf("status %d, headers %v: want 200 with rate-limit headers", w.status, w.header)
	}
	t.Logf("allocations a request: %v bare, %v limited; the decision and its headers %v", base, got, decision)
	if got > base+decision+extra {
		t.Errorf("the adapter allocates %v times a request of its own, want at most %v",
			got-base-decision, extra)
	}
}

// discard is a ResponseWriter that keeps the headers and the status only.
type discard struct {
	header http.Header
	status int
}

func (w *discard) Header() http.Header         { return w.header }
func (w *discard) WriteHeader(status int)      { w.status = status }
func (w *discard) Write(p []byte) (int, error) { return len(p), nil }

// DecisionAllocs returns the allocations of a decision of l on a request
// of tenant acme as the adapters make it (adapterkit.Handler.Decide), and
// of writing its headers with write.
func DecisionAllocs(t *testing.T, l *tollgate.Limiter, write func(d *tollgate.Decision)) float64 {
	t.Helper()
	h, err := adapterkit.Build(adapterkit.Spec[struct{}]{Limiter: l}, adapterkit.Framework{})
	if err != nil {
		t.Fatal(err)
	}
	call := adapterkit.Call{Context: context.Background(), Method: http.MethodGet, Route: "/x", Tenant: "acme"}
	return AllocsPerRun(t, 200, func() {
		a := h.Decide(struct{}{}, &call, adapterkit.Headers{})
		if a.Status != 0 {
			t.Fatalf("answer %d %+v: want the request allowed", a.Status, a.Body)
		}
		write(&a.Decision)
		a.Release()
	})
}
