package demo

import (
	"crypto/subtle"
	"log/slog"
	"net/http"
	"slices"

	"github.com/redis/go-redis/v9"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/insights"
	"github.com/tollgate-go/tollgate/insights/redisexchange"
)

// AdminPath is where the apps serve the upgrade-candidates page (HTML, and
// JSON with ?format=json) when ADMIN_TOKEN is set.
const AdminPath = "/admin/tollgate"

// UpgradePlans returns the plans the page may suggest: the plans a tenant
// can buy, so every plan but the trial.
func UpgradePlans() []tollgate.Plan {
	return slices.DeleteFunc(PlanList(), func(p tollgate.Plan) bool { return p.Name == "trial" })
}

// newInsights returns the tracker of upgrade candidates and its page behind
// cfg.AdminToken, or nils when no token is set: without a page nobody
// reads the tracker, so the apps do not keep one. With a Redis client the
// replicas share their candidates through it.
func newInsights(cfg Config, client redis.UniversalClient, logger *slog.Logger) (*insights.Tracker, http.Handler, error) {
	if cfg.AdminToken == "" {
		return nil, nil, nil
	}
	opts := []insights.Option{insights.WithPlans(UpgradePlans())}
	if client != nil {
		x, err := redisexchange.New(client)
		if err != nil {
			return nil, nil, err
		}
		opts = append(opts, insights.WithExchange(x, "")) // "": the host name and a random suffix
	}
	tracker, err := insights.New(opts...)
	if err != nil {
		return nil, nil, err
	}
	logger.Info("upgrade candidates served at "+AdminPath+" to requests with the admin token",
		slog.Bool("fleet", client != nil))
	return tracker, RequireAdmin(cfg.AdminToken, tracker.Handler()), nil
}

// RequireAdmin serves h only to requests with "Authorization: Bearer
// <token>", and answers the others 401. It stands in for the application's
// own authentication of its operators; the token is compared in constant
// time.
func RequireAdmin(token string, h http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tollgate admin"`)
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"unauthorized","message":"this page needs the admin token: Authorization: Bearer <ADMIN_TOKEN>"}` + "\n"))
			return
		}
		h.ServeHTTP(w, r)
	})
}
