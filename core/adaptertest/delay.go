package adaptertest

import (
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adapterkit"
)

// A timedResponse is one response of a burst and when it came, since the
// burst began.
type timedResponse struct {
	response
	took time.Duration
	done time.Time
}

// burst sends n requests for path as tenant all at once, each on a
// connection of its own, and returns the responses. Each one's time is
// counted from the moment the burst began, before any request reached the
// server, so that a request held 500ms shows at least 500ms however late
// its goroutine ran.
func (k *kit) burst(path, tenant string, n int) []timedResponse {
	k.t.Helper()
	client := &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{MaxConnsPerHost: n, MaxIdleConnsPerHost: n}}
	defer client.CloseIdleConnections()
	out := make([]timedResponse, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			req, err := http.NewRequest(http.MethodGet, k.base+path, nil)
			if err != nil {
				k.t.Error(err)
				return
			}
			req.Header.Set(adapterkit.TenantHeader, tenant)
			<-start
			resp, err := client.Do(req)
			if err != nil {
				k.t.Error(err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			out[i] = timedResponse{response: response{resp.StatusCode, resp.Header, string(body)}, done: time.Now()}
			k.check(out[i].response)
		})
	}
	began := time.Now()
	close(start)
	wg.Wait()
	for i := range out {
		out[i].took = out[i].done.Sub(began)
	}
	return out
}

// runDelayMode sends bursts to GET /held as a tenant on the Free plan
// (burst 20 at 2/s), with HeldDelay 500ms, on the real clock: of 21
// requests, 20 are answered at once and one after about 0.5s, all 200; of
// 40, the same 21 are served and the other 19 get 429 at once. A held
// request's headers describe the state after its wait.
func runDelayMode(t *testing.T, newServer serverOf) {
	// The held request's token is due 500ms after the first request
	// reached the server, so it is answered at least 500ms into the
	// burst; the others are answered at once, which a loaded machine
	// may stretch to nearly that.
	const atOnce, heldAtLeast = 480 * time.Millisecond, 480 * time.Millisecond
	for _, n := range []int{21, 40} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			k := newRealTimeKit(t, newServer)
			var fast, held, denied int
			for i, r := range k.burst("/held", "t-free", n) {
				switch {
				case r.status == http.StatusOK && r.took < atOnce:
					fast++
				case r.status == http.StatusOK && r.took >= heldAtLeast:
					held++
					k.wantHeldFigures(r)
				case r.status == http.StatusTooManyRequests && r.took < atOnce:
					denied++
					if r.header.Get("Retry-After") == "" {
						t.Errorf("a 429 without Retry-After")
					}
				default:
					t.Errorf("request %d: %d after %v (body %q)", i, r.status, r.took, r.body)
				}
			}
			if fast != 20 || held != 1 || denied != n-21 {
				t.Fatalf("%d at once: %d served at once, %d held and served, %d denied at once; want 20, 1 and %d",
					n, fast, held, denied, n-21)
			}
		})
	}
}

// wantHeldFigures checks the headers of the held request, served once the
// token it reserved came: none left, the next token half a second away
// (RateLimit's t rounds it up to 1), the bucket full 10s after the answer
// (20 tokens at 2/s), and no Retry-After on a request that was served.
func (k *kit) wantHeldFigures(r timedResponse) {
	k.t.Helper()
	if r.body != "ok" {
		k.t.Errorf("held request: body %q, want the handler's", r.body)
	}
	want := map[string]string{
		"X-RateLimit-Limit":     "20",
		"X-RateLimit-Remaining": "0",
		"RateLimit-Policy":      `"free";q=20;w=10`,
		"RateLimit":             `"free";r=0;t=1`,
	}
	for name, v := range want {
		if got := r.header.Get(name); got != v {
			k.t.Errorf("held request: %s = %q, want %q", name, got, v)
		}
	}
	// The bucket is full again 10s after the held request proceeded:
	// the reset is within a second of that.
	reset, err := strconv.ParseInt(r.header.Get("X-RateLimit-Reset"), 10, 64)
	if full := r.done.Add(10 * time.Second).Unix(); err != nil || reset < full-1 || reset > full+1 {
		k.t.Errorf("held request: X-RateLimit-Reset = %q, want about %d (10s after it was served)", r.header.Get("X-RateLimit-Reset"), full)
	}
	if v := r.header.Get("Retry-After"); v != "" {
		k.t.Errorf("held request: Retry-After = %q on a request that was served", v)
	}
}

// runShadowNeverHolds sends 40 requests at once to GET /held as a tenant on
// the Free plan (burst 20 at 2/s) with every plan in shadow mode: every one
// is served at once, none held, though the delay mode would hold one.
func runShadowNeverHolds(t *testing.T, newServer serverOf) {
	k := newRealTimeKit(t, newServer, tollgate.WithShadow())
	for i, r := range k.burst("/held", "t-free", 40) {
		if r.status != http.StatusOK || r.took >= 400*time.Millisecond {
			t.Errorf("request %d: %d after %v; want 200 at once", i, r.status, r.took)
		}
		k.wantNoFigures(r.response)
	}
}
