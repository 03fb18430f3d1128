package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core/redistest"
)

// slowBurst sends n GET /api/slow of tenant at once to the apps at urls,
// in turn, and returns the answers.
func slowBurst(t *testing.T, urls []string, tenant string, n int) []response {
	t.Helper()
	out := make([]response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = do(t, http.MethodGet, urls[i%len(urls)]+"/api/slow", tenant)
		}()
	}
	wg.Wait()
	return out
}

// TestSlowHoldsASlot: GET /api/slow waits a second and holds one of its
// tenant's slots in flight meanwhile: a free tenant has two, so of three
// at once, one gets 429 at once, as problem details stating the unit of
// its policy, and the other two 200.
func TestSlowHoldsASlot(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, a *app) {
		tenant := unique("slow")
		start := time.Now()
		answers := slowBurst(t, []string{a.url}, tenant, 3)
		ok, refused := 0, 0
		for _, r := range answers {
			switch r.status {
			case http.StatusOK:
				ok++
			case http.StatusTooManyRequests:
				refused++
				checkInFlightRefusal(t, r, "free-slow-inflight")
			default:
				t.Errorf("status %d (%s)", r.status, r.body)
			}
		}
		if ok != 2 || refused != 1 {
			t.Fatalf("3 requests of a free tenant at once: %d served, %d refused; want 2 and 1", ok, refused)
		}
		if took := time.Since(start); took < time.Second {
			t.Errorf("the slow requests took %v, want at least the second they hold their slot", took)
		}
		// The slots came back: two more run.
		if again := slowBurst(t, []string{a.url}, tenant, 2); again[0].status != http.StatusOK || again[1].status != http.StatusOK {
			t.Errorf("after the first two ended: statuses %d and %d, want 200", again[0].status, again[1].status)
		}
		// Every answer states the tenant's two slots.
		if p := answers[0].header.Get("RateLimit-Policy"); !strings.Contains(p, `"free-slow-inflight";q=2;qu="concurrent-requests"`) {
			t.Errorf("a slow request: RateLimit-Policy %q", p)
		}
	})
}

// checkInFlightRefusal checks that r refuses for want of a slot of policy,
// in the standards' words.
func checkInFlightRefusal(t *testing.T, r response, policy string) {
	t.Helper()
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Errorf("in-flight 429: Content-Type %q, want application/problem+json", ct)
	}
	var body struct {
		Type     string   `json:"type"`
		Status   int      `json:"status"`
		Violated []string `json:"violated-policies"`
	}
	if err := json.Unmarshal([]byte(r.body), &body); err != nil {
		t.Fatalf("in-flight 429 body %q: %v", r.body, err)
	}
	if body.Type != "https://iana.org/assignments/http-problem-types#quota-exceeded" || body.Status != 429 ||
		len(body.Violated) != 1 || body.Violated[0] != policy {
		t.Errorf("in-flight 429 body %s, want quota-exceeded violating %s", r.body, policy)
	}
	if ra := r.int(t, "Retry-After"); ra < 1 {
		t.Errorf("in-flight 429: Retry-After %d, want an estimate of at least 1", ra)
	}
	if p := r.header.Get("RateLimit-Policy"); !strings.Contains(p, `"`+policy+`";q=2;qu="concurrent-requests"`) {
		t.Errorf("in-flight 429: RateLimit-Policy %q, want %s with its unit", p, policy)
	}
}

// TestSlotsAreSharedByReplicas: two replicas on one Redis share a free
// tenant's two slots.
func TestSlotsAreSharedByReplicas(t *testing.T) {
	t.Parallel()
	env := []string{"REDIS_URL=redis://" + redistest.Start(t).Addr() + "/0"}
	a, b := start(t, "gin", env), start(t, "chi", env)
	answers := slowBurst(t, []string{a.url, b.url}, unique("shared-slow"), 4)
	ok := 0
	for _, r := range answers {
		switch r.status {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			checkInFlightRefusal(t, r, "free-slow-inflight")
		}
	}
	if ok != 2 {
		t.Fatalf("4 requests at once through two replicas: %d served, want the tenant's 2 slots", ok)
	}
}
