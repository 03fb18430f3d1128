package tollgategin_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/dunglas/httpsfv"
	"github.com/gin-gonic/gin"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adapterkit"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	tollgategin "github.com/tollgate-go/tollgate/gin"
)

func init() {
	// Debug mode prints every route registration to stdout, which would
	// clutter the test output and break the examples' Output checks.
	gin.SetMode(gin.TestMode)
}

func ok(c *gin.Context) { c.String(http.StatusOK, "ok") }

func serve(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// authenticate is the kit's authentication in gin's idiom: the tenant goes
// into the gin context.
func authenticate(c *gin.Context) {
	if tenant := adaptertest.Tenant(c.GetHeader("X-Tenant-ID"), c.GetHeader(adaptertest.EscapedTenantHeader)); tenant != "" {
		c.Set(adaptertest.TenantKey{}, tenant)
	}
}

// fields parses header values with a parser of structured fields that is
// not tollgate's.
var fields = adaptertest.FieldParsers{
	List: func(v string) error { _, err := httpsfv.UnmarshalList([]string{v}); return err },
	Item: func(v string) error { _, err := httpsfv.UnmarshalItem([]string{v}); return err },
}

// slow is the handler of the kit's in-flight routes.
func slow(s adaptertest.Setup) gin.HandlerFunc {
	return func(c *gin.Context) {
		s.Slow(c.Request.Context(), c.GetHeader(adaptertest.SlowHeader))
		c.String(http.StatusOK, "ok")
	}
}

func TestConformance(t *testing.T) {
	adaptertest.RunWith(t, func(t *testing.T, s adaptertest.Setup) string {
		byTenant := tollgategin.WithTenant(tollgategin.TenantFromContext(adaptertest.TenantKey{}))
		limit := tollgategin.New(s.Limiter, byTenant, tollgategin.WithSkip(func(c *gin.Context) bool {
			return c.FullPath() == "/skipped"
		}))
		r := gin.New()
		r.Use(authenticate)
		r.GET("/limited", limit, ok)
		r.GET("/skipped", limit, ok)
		r.GET("/costly", tollgategin.New(s.Limiter, tollgategin.WithCost(5), byTenant), ok)
		r.GET("/custom", tollgategin.New(s.Limiter, byTenant, tollgategin.WithDenyHandler(func(c *gin.Context, d tollgate.Decision) {
			c.JSON(http.StatusTeapot, gin.H{"denied": d.Tenant})
		})), ok)
		r.GET("/public", tollgategin.New(s.Limiter, byTenant, tollgategin.WithMissingTenantHandler(func(*gin.Context) {})), ok)
		r.GET("/reports/:id", tollgategin.New(s.Limiter, tollgategin.WithBudget(s.Budget), byTenant), ok)
		r.GET("/by-header", tollgategin.New(s.Limiter), ok)
		r.GET("/held", tollgategin.New(s.Limiter, byTenant, tollgategin.WithMaxDelay(adaptertest.HeldDelay, 0)), ok)
		r.GET("/slow", tollgategin.New(s.Limiter, byTenant), slow(s))
		r.GET("/slow-held", tollgategin.New(s.Limiter, byTenant, tollgategin.WithMaxDelay(adaptertest.SlotDelay, 0)), slow(s))
		return serve(t, r)
	}, fields)
}

// TestClientIP runs on a default engine, which believes X-Forwarded-For
// from every peer (c.ClientIP); the adapter believes it only from the
// proxies it is given.
func TestClientIP(t *testing.T) {
	adaptertest.RunClientIP(t, func(t *testing.T, l *tollgate.Limiter, trusted []netip.Prefix) string {
		r := gin.New()
		r.GET("/ip", tollgategin.New(l, tollgategin.WithTenant(tollgategin.TenantFromClientIP(trusted...))), ok)
		return serve(t, r)
	})
}

// TestClientIPIgnoresEngineProxies: gin's own trusted proxies make
// c.ClientIP believe a peer; the adapter still needs its own list.
func TestClientIPIgnoresEngineProxies(t *testing.T) {
	l, _, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(three))
	r := gin.New()
	if err := r.SetTrustedProxies([]string{"10.0.0.0/8"}); err != nil {
		t.Fatal(err)
	}
	r.GET("/ip", tollgategin.New(l, tollgategin.WithTenant(tollgategin.TenantFromClientIP())), ok)
	for i, want := range []string{"2", "1", "0"} {
		w := adaptertest.Serve(r, "GET", "/ip", "10.1.2.3:4711", "X-Forwarded-For", "203.0.113."+string(rune('1'+i)))
		if w.Status != http.StatusOK || w.Header.Get("X-RateLimit-Remaining") != want {
			t.Fatalf("request %d: status %d, remaining %q; want 200 and %s: one bucket for the peer",
				i+1, w.Status, w.Header.Get("X-RateLimit-Remaining"), want)
		}
	}
}

var three = tollgate.Plan{Name: "three", Limit: tollgate.Limit{Rate: 1, Burst: 3}}

// TestRegistration registers the handler in each way gin allows and checks
// that the limit applies where it is registered and nowhere else.
func TestRegistration(t *testing.T) {
	l, _, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(three))
	limit := tollgategin.New(l)

	r := gin.New()
	r.GET("/open", ok)
	r.GET("/single", limit, ok)
	api := r.Group("/api", limit)
	api.GET("/a", ok)
	api.GET("/b", ok)

	all := gin.New()
	all.Use(limit)
	all.GET("/any", ok)
	all.POST("/any", ok)

	for _, tc := range []struct {
		h       http.Handler
		method  string
		path    string
		limited bool
	}{
		{r, "GET", "/open", false},
		{r, "GET", "/single", true},
		{r, "GET", "/api/a", true},
		{r, "GET", "/api/b", true},
		{all, "GET", "/any", true},
		{all, "POST", "/any", true},
	} {
		w := adaptertest.Serve(tc.h, tc.method, tc.path, "", "X-Tenant-ID", "t-"+tc.path)
		if w.Status != http.StatusOK || w.Body != "ok" {
			t.Errorf("%s %s: status %d body %q, want 200 ok", tc.method, tc.path, w.Status, w.Body)
		}
		if got := w.Header.Get("X-RateLimit-Limit") != ""; got != tc.limited {
			t.Errorf("%s %s: limited = %v, want %v", tc.method, tc.path, got, tc.limited)
		}
	}
	// The group's routes share each tenant's bucket.
	adaptertest.Serve(r, "GET", "/api/b", "", "X-Tenant-ID", "shared")
	if got := adaptertest.Serve(r, "GET", "/api/a", "", "X-Tenant-ID", "shared").Header.Get("X-RateLimit-Remaining"); got != "1" {
		t.Errorf("second request in the group: remaining %q, want 1", got)
	}
}

// TestMissingTenantHandler: in gin's idiom the handler either aborts with
// an answer of its own or returns without aborting, which lets the request
// through unlimited.
func TestMissingTenantHandler(t *testing.T) {
	l, _, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(three))
	r := gin.New()
	r.GET("/public", tollgategin.New(l, tollgategin.WithMissingTenantHandler(func(*gin.Context) {})), ok)
	r.GET("/private", tollgategin.New(l, tollgategin.WithMissingTenantHandler(func(c *gin.Context) {
		c.AbortWithStatusJSON(http.StatusForbidden, gin.H{"error": "log in"})
	})), ok)

	if w := adaptertest.Serve(r, "GET", "/public", ""); w.Status != http.StatusOK || w.Body != "ok" || w.Header.Get("X-RateLimit-Limit") != "" {
		t.Errorf("/public: status %d body %q limit %q, want an unlimited 200", w.Status, w.Body, w.Header.Get("X-RateLimit-Limit"))
	}
	if w := adaptertest.Serve(r, "GET", "/private", ""); w.Status != http.StatusForbidden || !strings.Contains(w.Body, "log in") {
		t.Errorf("/private: status %d body %q, want the application's 403", w.Status, w.Body)
	}
}

// TestNilLimiterReachesGinErrors: besides the kit's 500, the cause goes to
// c.Errors, which gin's logger prints, and never to the client.
func TestNilLimiterReachesGinErrors(t *testing.T) {
	adaptertest.CaptureDefaultLog(t)
	var seen []string
	r := gin.New()
	r.Use(func(c *gin.Context) {
		c.Next()
		seen = append(seen, c.Errors.String())
	})
	r.GET("/x", tollgategin.New(nil), ok)
	w := adaptertest.Serve(r, "GET", "/x", "", "X-Tenant-ID", "acme")
	if w.Status != http.StatusInternalServerError || strings.Contains(w.Body, "nil") {
		t.Fatalf("status %d body %q, want 500 without the cause", w.Status, w.Body)
	}
	if len(seen) != 1 || !strings.Contains(seen[0], adapterkit.ErrNoLimiter.Error()) {
		t.Errorf("c.Errors = %q, want the configuration error", seen)
	}
}
