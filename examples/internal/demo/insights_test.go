package demo

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestAdminAndShadowFromEnv(t *testing.T) {
	t.Setenv("ADMIN_TOKEN", "")
	t.Setenv("SHADOW", "")
	if c := ConfigFromEnv(); c.AdminToken != "" || c.Shadow {
		t.Errorf("defaults: %+v, want no page and no shadow mode", c)
	}
	t.Setenv("ADMIN_TOKEN", "tok")
	t.Setenv("SHADOW", "1")
	if c := ConfigFromEnv(); c.AdminToken != "tok" || !c.Shadow {
		t.Errorf("from the environment: %+v", c)
	}
}

func TestRequireAdmin(t *testing.T) {
	h := RequireAdmin("tok", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	for auth, want := range map[string]int{"": 401, "Bearer tok": 418, "Bearer tok ": 401, "bearer tok": 401, "Bearer to": 401, "tok": 401} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, AdminPath, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("Authorization %q: %d, want %d", auth, rec.Code, want)
		}
	}
}

func TestNewLimiterServesThePageOnlyWithAToken(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	_, _, admin, release, err := NewLimiter(context.Background(), Config{}, logger)
	if err != nil || admin != nil {
		t.Fatalf("without a token: page %v, %v", admin, err)
	}
	release()
	_, _, admin, release, err = NewLimiter(context.Background(), Config{AdminToken: "tok"}, logger)
	if err != nil || admin == nil {
		t.Fatalf("with a token: page %v, %v", admin, err)
	}
	defer release()
	for _, p := range UpgradePlans() {
		if p.Name == "trial" {
			t.Fatal("the trial is suggested as an upgrade")
		}
	}
}
