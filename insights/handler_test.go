package insights_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/insights"
)

func get(t *testing.T, url string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestHandlerServesJSONAndHTML(t *testing.T) {
	c := newClock(monday)
	tr := newTracker(t, c)
	l := newLimiter(t, c, tr)
	flood(t, l, "loopy", "/api/hello", 1, 100)
	flood(t, l, "initech", "/api/hello", 1, 110)
	srv := httptest.NewServer(tr.Handler())
	defer srv.Close()

	for _, how := range [][]string{{"?window=1h&format=json"}, {"?window=1h", "Accept", "application/json"}} {
		resp, body := get(t, srv.URL+how[0], how[1:]...)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%v: %d %s", how, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		var rep insights.Report
		if err := json.Unmarshal([]byte(body), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Window != insights.LastHour || len(rep.Candidates) != 2 || rep.Candidates[0].Tenant != "loopy" || rep.Candidates[0].SuggestedPlan != "startup" { // 100 at once: a burst of 100
			t.Fatalf("%v: %+v", how, rep)
		}
	}

	resp, body := get(t, srv.URL+"?window=1h", "Accept", "text/html,application/json;q=0.9")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("html: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Fatalf("CSP %q", csp)
	}
	for _, want := range []string{`data-tenant="loopy" data-plan="free" data-suggested="startup"`, `<svg class="chart"`, `aria-current="page">Last hour`, "This replica"} {
		if !strings.Contains(body, want) {
			t.Fatalf("page lacks %q", want)
		}
	}
	if strings.Index(body, `data-tenant="loopy"`) > strings.Index(body, `data-tenant="initech"`) {
		t.Fatal("loopy is not first on the page")
	}
	for _, external := range []string{"<script", "<link", "src=", "http://", "https://"} {
		if strings.Contains(body, external) {
			t.Fatalf("page has %q: it must not load anything", external)
		}
	}
	if strings.Count(body, "<rect ") != 2*13 {
		t.Fatalf("%d bars, want 13 for each of 2 tenants", strings.Count(body, "<rect "))
	}
}

func TestHandlerRejectsBadQueries(t *testing.T) {
	srv := httptest.NewServer(newTracker(t, newClock(monday)).Handler())
	defer srv.Close()
	for query, field := range map[string]string{
		"?window=2h":    "window",
		"?n=0":          "n must be",
		"?n=1000":       "n must be",
		"?n=x":          "n must be",
		"?format=xml":   "format",
		"?window=%3Cb%": "", // not a valid query escape: an empty window, the default
	} {
		resp, body := get(t, srv.URL+query)
		if field == "" {
			if resp.StatusCode != 200 {
				t.Errorf("%s: %d", query, resp.StatusCode)
			}
			continue
		}
		if resp.StatusCode != 400 || !strings.Contains(body, field) {
			t.Errorf("%s: %d %q; want 400 naming %s", query, resp.StatusCode, body, field)
		}
	}
	resp, err := http.Post(srv.URL, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Fatalf("POST: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

func TestHandlerEscapesTenants(t *testing.T) {
	c := newClock(monday)
	tr := newTracker(t, c)
	evil := `"><script>alert(1)</script>`
	insights.Record(tr, insights.Event{Tenant: evil, Plan: "free", Outcome: "denied", Cost: 1,
		Method: "GET", Route: `/x"><img src=x>`})
	srv := httptest.NewServer(tr.Handler())
	defer srv.Close()
	_, body := get(t, srv.URL)
	if strings.Contains(body, "<script>") || strings.Contains(body, "<img") {
		t.Fatal("a tenant or route name reached the page unescaped")
	}
	if !strings.Contains(body, "&lt;script&gt;") {
		t.Fatal("the tenant is missing from the page")
	}
}

func TestLongNamesStayPublishable(t *testing.T) {
	x, _, _ := newExchange(t)
	c := newClock(monday)
	tr := newTracker(t, c, insights.WithExchange(x, "a"), insights.WithFlushInterval(time.Hour))
	long := strings.Repeat("é", 3000)
	insights.Record(tr, insights.Event{Tenant: "t", Plan: "free", Outcome: "denied", Cost: 1, Method: long, Route: long})
	// Longer than any tenant a Limiter accepts, and than a summary carries.
	insights.Record(tr, insights.Event{Tenant: strings.Repeat("x", 1025), Plan: "free", Outcome: "denied", Cost: 1})
	rep := candidates(t, tr, insights.LastHour)
	if !rep.Fleet || len(rep.Candidates) != 1 {
		t.Fatalf("%+v", rep)
	}
	if r := rep.Candidates[0].Routes[0].Route; len(r) > 200 || !strings.HasPrefix(long, r) {
		t.Fatalf("route kept as %d bytes", len(r))
	}
}

func TestHandlerEmptyWindow(t *testing.T) {
	c := newClock(monday)
	tr := newTracker(t, c)
	insights.Record(tr, insights.Event{Tenant: "old", Plan: "free", Outcome: "denied", Cost: 1})
	c.add(3 * time.Hour)
	srv := httptest.NewServer(tr.Handler())
	defer srv.Close()
	_, body := get(t, srv.URL+"?window=1h")
	if !strings.Contains(body, `id="empty"`) || strings.Contains(body, `data-tenant="old"`) {
		t.Fatal("the last hour should be empty")
	}
	_, body = get(t, srv.URL+"?window=24h&format=json")
	if !strings.Contains(body, `"tenant": "old"`) {
		t.Fatalf("the last day should list old: %s", body)
	}
}
