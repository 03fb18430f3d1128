// Command chi is the tollgate example API on chi.
//
//	go run ./examples/chi                                      # :8080, memory store
//	ADDR=:8081 REDIS_URL=redis://127.0.0.1:6379/0 go run ./examples/chi
//
// GET /api/hello costs a tenant 1 token, POST /api/reports 10 (from the plan
// and from the tenant's reports budget, 50 tokens an hour), and GET /healthz
// is not limited, nor GET /metrics (Prometheus). The tenant is the
// X-Tenant-ID header: acme is on the enterprise plan, globex on growth,
// initech on startup, umbrella on trial (a burst of 10 at 5/s and 30
// requests a UTC day), anyone else on free. With ADMIN_TOKEN set,
// GET /admin/tollgate serves the upgrade candidates to requests with
// "Authorization: Bearer $ADMIN_TOKEN"; with SHADOW=1, limits are computed
// and recorded but never enforced.
package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	tollgatechi "github.com/tollgate-go/tollgate/chi"
	"github.com/tollgate-go/tollgate/core/tollgatehttp"
	"github.com/tollgate-go/tollgate/examples/internal/demo"
)

func main() { demo.Main(run) }

func run(ctx context.Context, logger *slog.Logger) error {
	cfg := demo.ConfigFromEnv()
	limiter, metrics, admin, closeStore, err := demo.NewLimiter(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer closeStore()

	// The limiter reads the tenant that authentication stored, so the
	// budget spent is always the caller's own.
	byTenant := tollgatehttp.WithTenant(tollgatehttp.TenantFromContext(tenantKey{}))

	r := chi.NewRouter()
	r.Use(middleware.Recoverer)
	r.Get("/healthz", healthz) // not limited: load balancers must always get through
	// Not limited either: the scraper must always get through.
	r.Method(http.MethodGet, "/metrics", metrics)
	if admin != nil {
		r.Method(http.MethodGet, demo.AdminPath, admin) // not limited; behind the admin token
	}
	r.Route("/api", func(r chi.Router) {
		r.Use(authenticate)
		r.With(tollgatechi.Middleware(limiter, byTenant)).Get("/hello", hello)
		r.With(tollgatechi.Middleware(limiter, byTenant,
			tollgatehttp.WithCost(demo.ReportCost), tollgatehttp.WithBudget(demo.ReportsBudget))).Post("/reports", createReport)
	})

	return demo.ServeHTTP(ctx, cfg.Addr, logger, r)
}

// tenantKey is the context key under which authenticate stores the tenant.
type tenantKey struct{}

// authenticate stands in for the app's authentication. A real one verifies
// a token or session and stores the tenant of the authenticated principal;
// this one trusts the X-Tenant-ID header as it is. A request without a
// tenant goes on with none, and the limiter answers it 401.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tenant := r.Header.Get(demo.TenantHeader); tenant != "" {
			r = r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant))
		}
		next.ServeHTTP(w, r)
	})
}

func healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func hello(w http.ResponseWriter, r *http.Request) {
	tenant, _ := r.Context().Value(tenantKey{}).(string)
	writeJSON(w, http.StatusOK, map[string]string{"message": "hello, " + tenant})
}

// createReport stands in for expensive work, which is why it costs 10
// tokens and draws from a budget of its own: a tenant can not spend its
// whole plan on reports.
func createReport(w http.ResponseWriter, r *http.Request) {
	tenant, _ := r.Context().Value(tenantKey{}).(string)
	writeJSON(w, http.StatusAccepted, map[string]string{"status": "queued", "tenant": tenant})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
