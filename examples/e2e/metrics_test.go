package e2e

import (
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tollgate-go/tollgate/examples/internal/launch"
	"github.com/tollgate-go/tollgate/internal/testredis"
)

// decisions are the counts of tollgate_decisions_total of a scrape, by
// plan and outcome (every policy and route together).
type decisions map[[2]string]float64

// scrape reads the app's /metrics over HTTP with Prometheus's text parser.
// It returns the decisions, every family, and the body.
func scrape(t *testing.T, c *http.Client, app *launch.App) (decisions, map[string]*dto.MetricFamily, string) {
	t.Helper()
	r := do(t, c, http.MethodGet, app.URL+"/metrics", "")
	if r.status != http.StatusOK {
		t.Fatalf("GET /metrics: status %d (%s)", r.status, r.body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(r.body)))
	if err != nil {
		t.Fatalf("GET /metrics is not the Prometheus text format: %v", err)
	}
	d := decisions{}
	if f := families["tollgate_decisions_total"]; f != nil {
		for _, m := range f.GetMetric() {
			d[[2]string{label(m, "plan"), label(m, "outcome")}] += m.GetCounter().GetValue()
		}
	}
	return d, families, string(r.body)
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// sum adds up the counter family name, label values that fit match.
func sum(families map[string]*dto.MetricFamily, name string, match func(*dto.Metric) bool) float64 {
	var n float64
	if f := families[name]; f != nil {
		for _, m := range f.GetMetric() {
			if match == nil || match(m) {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// TestMetricsCountEveryDecision sends each app, on the memory store, a
// known mix of requests and finds on /metrics exactly the decisions the
// client saw, by plan and outcome, under route patterns and never a tenant.
func TestMetricsCountEveryDecision(t *testing.T) {
	for _, fw := range launch.Frameworks {
		t.Run(fw, func(t *testing.T) {
			app := start(t, fw)
			c := newClient()
			free := unique(fw)
			for range 3 {
				if r := do(t, c, http.MethodGet, app.URL+"/api/hello", "acme"); r.status != http.StatusOK {
					t.Fatalf("acme: status %d", r.status)
				}
			}
			if r := do(t, c, http.MethodPost, app.URL+"/api/reports", "acme"); r.status != http.StatusAccepted {
				t.Fatalf("acme's report: status %d", r.status)
			}
			// The free plan's burst is 20 at 2 a second: of 30 quick
			// requests about 20 pass; the statuses say exactly how many.
			status := map[int]float64{}
			for range 30 {
				status[do(t, c, http.MethodGet, app.URL+"/api/hello", free).status]++
			}
			if status[http.StatusTooManyRequests] == 0 || status[http.StatusOK]+status[http.StatusTooManyRequests] != 30 {
				t.Fatalf("free tenant: statuses %v", status)
			}
			do(t, c, http.MethodGet, app.URL+"/api/hello", "") // 401: no tenant, no decision
			do(t, c, http.MethodGet, app.URL+"/healthz", "")   // not limited

			got, families, body := scrape(t, c, app)
			want := decisions{
				{"enterprise", "allowed"}: 3 + 1,
				{"free", "allowed"}:       status[http.StatusOK],
				{"free", "denied"}:        status[http.StatusTooManyRequests],
			}
			var total float64
			for k, v := range got {
				total += v
				if v != want[k] {
					t.Errorf("decisions of plan %s, outcome %s: %v, want %v", k[0], k[1], v, want[k])
				}
			}
			if total != 34 {
				t.Errorf("%v decisions counted, want 34", total)
			}
			if spent := sum(families, "tollgate_tokens_spent_total", func(m *dto.Metric) bool { return label(m, "plan") == "enterprise" }); spent != 3+10 {
				t.Errorf("enterprise spent %v tokens, want 13", spent)
			}
			// Routes are the router's patterns; no label names a tenant.
			for _, f := range families {
				for _, m := range f.GetMetric() {
					for _, l := range m.GetLabel() {
						if strings.Contains(strings.ToLower(l.GetName()), "tenant") {
							t.Errorf("%s has a label %s", f.GetName(), l.GetName())
						}
					}
					if r := label(m, "route"); strings.HasPrefix(f.GetName(), "tollgate_") && r != "" &&
						!strings.Contains(r, "/api/hello") && !strings.Contains(r, "/api/reports") {
						t.Errorf("%s: route %q", f.GetName(), r)
					}
				}
			}
			if strings.Contains(body, free) || strings.Contains(body, "acme") {
				t.Error("/metrics names a tenant")
			}
			if keys := families["tollgate_store_keys"]; keys == nil || keys.GetMetric()[0].GetGauge().GetValue() < 2 {
				t.Errorf("tollgate_store_keys: %v, want the memory store's 2 tenants or more", keys)
			}
			if families["go_goroutines"] == nil {
				t.Error("no Go runtime metrics")
			}
		})
	}
}

// TestMetricsCountFailOpen runs each app on a Redis of its own, kills the
// Redis, and finds the decisions that failed open counted, with the
// store's errors.
func TestMetricsCountFailOpen(t *testing.T) {
	for _, fw := range launch.Frameworks {
		t.Run(fw, func(t *testing.T) {
			srv := testredis.Start(t)
			app := start(t, fw, "REDIS_URL=redis://"+srv.Addr()+"/0")
			c := newClient()
			tenant := unique(fw)
			limited, unlimited := 0.0, 0.0
			send := func() {
				r := do(t, c, http.MethodGet, app.URL+"/api/hello", tenant)
				switch {
				case r.status != http.StatusOK:
					t.Fatalf("status %d (%s), want 200", r.status, r.body)
				case r.header.Get("X-RateLimit-Limit") == "":
					unlimited++ // failed open
				default:
					limited++
				}
			}
			for range 5 {
				send()
			}
			if limited == 0 {
				t.Fatal("no request was limited while Redis ran")
			}
			srv.Kill()
			for range 10 {
				send()
			}
			if unlimited < 10 {
				t.Fatalf("%v requests failed open, want the 10 sent after the kill at least", unlimited)
			}
			got, families, _ := scrape(t, c, app)
			if got[[2]string{"free", "allowed"}] != limited || got[[2]string{"free", "failed_open"}] != unlimited {
				t.Errorf("decisions %v, want %v allowed and %v failed open", got, limited, unlimited)
			}
			if errs := sum(families, "tollgate_store_errors_total", nil); errs != unlimited {
				t.Errorf("%v store errors counted, want %v", errs, unlimited)
			}
		})
	}
}
