package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

type response struct {
	status  int
	header  http.Header
	body    []byte
	elapsed time.Duration
}

// client is the tests' HTTP client: generous, as a loaded machine is slow
// and no check here is about timing but those that measure themselves.
var client = &http.Client{Timeout: 15 * time.Second}

// do sends one request; tenant "" sends no X-Tenant-ID.
func do(t *testing.T, method, url, tenant string) response {
	t.Helper()
	return send(t, method, url, nil, "X-Tenant-ID", tenant)
}

// send sends one request with body (nil for none) and the header pairs
// whose value is not "".
func send(t *testing.T, method, url string, body any, header ...string) response {
	t.Helper()
	var r io.Reader
	if body != nil {
		js, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = strings.NewReader(string(js))
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] != "" {
			req.Header.Set(header[i], header[i+1])
		}
	}
	began := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return response{resp.StatusCode, resp.Header, b, time.Since(began)}
}

func (r response) int(t *testing.T, header string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(r.header.Get(header), 10, 64)
	if err != nil {
		t.Fatalf("%s: %q is not an integer (headers %v)", header, r.header.Get(header), r.header)
	}
	return n
}

// json decodes the body, a JSON object (or an RFC 9457 problem).
func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") && !strings.HasPrefix(ct, "application/problem+json") {
		t.Errorf("Content-Type = %q, want JSON", ct)
	}
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", r.body, err)
	}
	return m
}

// deniedBy returns the policy that a 429's body names.
func (r response) deniedBy(t *testing.T) string {
	t.Helper()
	body := r.json(t)
	if p, ok := body["policy"].(string); ok {
		return p
	}
	if ps, ok := body["policies"].([]any); ok && len(ps) > 0 {
		if p, ok := ps[0].(map[string]any); ok {
			return fmt.Sprint(p["name"])
		}
		return fmt.Sprint(ps[0])
	}
	t.Fatalf("the 429's body names no policy: %s", r.body)
	return ""
}

// failedOpen reports whether r is an answer that the app let through
// without limits because its store did not answer in time (fail-open),
// as a Redis starved of CPU on a loaded machine may not. Such a request
// may still have been counted, late.
func (r response) failedOpen() bool {
	return r.status/100 == 2 && r.header.Get("RateLimit") == ""
}

// rateLimitHeaders are every header a limited response may carry.
var rateLimitHeaders = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit", "Retry-After"}

func noRateLimitHeaders(t *testing.T, what string, r response) {
	t.Helper()
	for _, h := range rateLimitHeaders {
		if v := r.header.Values(h); len(v) > 0 {
			t.Errorf("%s: %s: %q, want none", what, h, v)
		}
	}
}

// unique returns a tenant that no other test uses, on the free plan.
func unique(name string) string {
	return fmt.Sprintf("e2e-%s-%d", name, time.Now().UnixNano())
}

// flood sends n GET /api/hello of tenant and counts the statuses.
func flood(t *testing.T, a *app, tenant string, n int) map[int]int {
	t.Helper()
	got := map[int]int{}
	for range n {
		got[do(t, http.MethodGet, a.url+"/api/hello", tenant).status]++
	}
	return got
}

// each runs test on every HTTP app, in parallel.
func each(t *testing.T, test func(t *testing.T, name string)) {
	for _, name := range httpApps {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, name)
		})
	}
}
