package tollgateprom_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/tollgatehttp"
	tollgateprom "github.com/tollgate-go/tollgate/prometheus"
)

// An app as the examples build it: net/http routes limited by the
// middleware, with the Collector on /metrics, scraped over real HTTP.
func TestScrapeOverHTTP(t *testing.T) {
	store := memory.New(memory.WithSweepInterval(0))
	t.Cleanup(func() { store.Close() })
	metrics, err := tollgateprom.New(tollgateprom.WithStore(store))
	if err != nil {
		t.Fatal(err)
	}
	plans, err := tollgate.NewStaticResolver(tollgate.DefaultPlans(), "free", map[string]string{"acme": "enterprise"})
	if err != nil {
		t.Fatal(err)
	}
	limiter, err := tollgate.New(store, plans, tollgate.WithObserver(metrics), tollgate.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics)

	mux := http.NewServeMux()
	limit := tollgatehttp.Middleware(limiter)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	mux.Handle("GET /users/{id}", limit(ok))
	mux.Handle("POST /reports", limit(ok))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	send := func(method, path, tenant string) int {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		req.Header.Set(tollgatehttp.DefaultTenantHeader, tenant)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// The free plan's burst is 20 at 2 a second: of 40 quick requests,
	// 20 pass and a few more as the bucket refills on the real clock, so
	// the test checks the split against the statuses the client saw.
	status := map[int]int{}
	for i := range 40 {
		status[send("GET", fmt.Sprintf("/users/%d", i), "loopy-tenant-7")]++
	}
	for range 5 {
		status[send("POST", "/reports", "acme")]++
	}
	if status[http.StatusTooManyRequests] == 0 || status[http.StatusOK] < 25 {
		t.Fatalf("statuses %v", status)
	}

	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parsing the scrape: %v\n%s", err, body)
	}
	var list []*dto.MetricFamily
	for _, f := range families {
		list = append(list, f)
	}
	got := samples(t, list)

	freeOK := got[`tollgate_decisions_total{outcome="allowed",plan="free",policy="free",route="GET /users/{id}"}`]
	freeDenied := got[`tollgate_decisions_total{outcome="denied",plan="free",policy="free",route="GET /users/{id}"}`]
	if freeOK+freeDenied != 40 || freeDenied != float64(status[http.StatusTooManyRequests]) {
		t.Errorf("free: %v allowed + %v denied, want 40 with %d denied", freeOK, freeDenied, status[http.StatusTooManyRequests])
	}
	for k, want := range map[string]float64{
		`tollgate_decisions_total{outcome="allowed",plan="enterprise",policy="enterprise",route="POST /reports"}`: 5,
		`tollgate_tokens_spent_total{plan="enterprise",route="POST /reports"}`:                                    5,
		`tollgate_tokens_spent_total{plan="free",route="GET /users/{id}"}`:                                        freeOK,
		`tollgate_store_latency_seconds_count{}`:                                                                  45,
		`tollgate_store_tenants{store="main"}`:                                                                    2,
		`tollgate_store_evictions_total{store="main"}`:                                                            0,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
	// No tenant, as a label or a value, and no raw path.
	for _, f := range list {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(strings.ToLower(l.GetName()), "tenant") {
					t.Errorf("%s has a label %s", f.GetName(), l.GetName())
				}
			}
		}
	}
	for _, leak := range []string{"loopy-tenant-7", "acme", "/users/1"} {
		if strings.Contains(string(body), leak) {
			t.Errorf("the scrape contains %q", leak)
		}
	}
}
