package tollgategin_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	tollgategin "github.com/tollgate-go/tollgate/gin"
)

func init() {
	// Debug mode prints every route registration to stdout, which would
	// clutter the test output and break the examples' Output checks.
	gin.SetMode(gin.TestMode)
}

func ok(c *gin.Context) { c.String(http.StatusOK, "ok") }

func TestConformance(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, s adaptertest.Setup) string {
		limit := tollgategin.New(s.Limiter, tollgategin.WithSkip(func(c *gin.Context) bool {
			return c.FullPath() == "/skipped"
		}))
		costly := tollgategin.New(s.Limiter, tollgategin.WithCost(5))
		custom := tollgategin.New(s.Limiter, tollgategin.WithDenyHandler(func(c *gin.Context, d tollgate.Decision) {
			c.JSON(http.StatusTeapot, gin.H{"denied": d.Tenant})
		}))
		r := gin.New()
		r.GET("/limited", limit, ok)
		r.GET("/skipped", limit, ok)
		r.GET("/costly", costly, ok)
		r.GET("/custom", custom, ok)
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)
		return srv.URL
	})
}

// newLimiter returns a Limiter over plan for every tenant, on a stopped
// clock, that records the throttle events it reports.
func newLimiter(t *testing.T, plan tollgate.Plan) (*tollgate.Limiter, *adaptertest.Events) {
	l, ev, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(plan))
	return l, ev
}

var three = tollgate.Plan{Name: "three", Limit: tollgate.Limit{Rate: 1, Burst: 3}}

// serve sends one request through h in process; setup may change it first.
func serve(h http.Handler, method, target string, setup func(*http.Request)) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	if setup != nil {
		setup(req)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func tenant(id string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set("X-Tenant-ID", id) }
}

func TestTenantFromContext(t *testing.T) {
	l, _ := newLimiter(t, three)
	r := gin.New()
	// The application's authentication middleware puts the principal in
	// the gin context; a header no longer names the tenant.
	r.Use(func(c *gin.Context) {
		if tok := c.GetHeader("Authorization"); strings.HasPrefix(tok, "Bearer ") {
			c.Set("tenant", strings.TrimPrefix(tok, "Bearer "))
		}
	})
	r.Use(tollgategin.New(l, tollgategin.WithTenant(tollgategin.TenantFromContext("tenant"))))
	r.GET("/x", ok)

	auth := func(tok string) func(*http.Request) {
		return func(r *http.Request) {
			r.Header.Set("Authorization", "Bearer "+tok)
			r.Header.Set("X-Tenant-ID", "someone-else")
		}
	}
	for i, want := range []string{"2", "1", "0"} {
		w := serve(r, "GET", "/x", auth("acme"))
		if w.Code != http.StatusOK || w.Header().Get("X-RateLimit-Remaining") != want {
			t.Fatalf("request %d: status %d, remaining %q, want 200 and %q", i, w.Code, w.Header().Get("X-RateLimit-Remaining"), want)
		}
	}
	if w := serve(r, "GET", "/x", auth("acme")); w.Code != http.StatusTooManyRequests {
		t.Fatalf("4th request of acme: status %d, want 429", w.Code)
	}
	if w := serve(r, "GET", "/x", auth("globex")); w.Code != http.StatusOK {
		t.Fatalf("globex: status %d, want 200 (a bucket of its own)", w.Code)
	}
	if w := serve(r, "GET", "/x", tenant("acme")); w.Code != http.StatusUnauthorized {
		t.Fatalf("no principal: status %d, want 401", w.Code)
	}
}

type principal struct{ id string }

func (p principal) String() string { return p.id }

func TestTenantFromContextStringer(t *testing.T) {
	l, _ := newLimiter(t, three)
	r := gin.New()
	r.Use(func(c *gin.Context) { c.Set(principalKey{}, principal{"acme"}) })
	r.GET("/x", tollgategin.New(l, tollgategin.WithTenant(tollgategin.TenantFromContext(principalKey{}))), ok)
	if w := serve(r, "GET", "/x", nil); w.Code != http.StatusOK || w.Header().Get("X-RateLimit-Remaining") != "2" {
		t.Fatalf("status %d, remaining %q, want 200 and 2", w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
}

type principalKey struct{}

func TestTenantFromClientIP(t *testing.T) {
	cases := []struct {
		name    string
		trusted []string
		peer    string
		xff     []string // one request each
		want    []string // X-RateLimit-Remaining of each
	}{
		{
			// With no trusted proxy the peer is the client, whatever
			// X-Forwarded-For claims.
			name: "untrusted peer, spoofed X-Forwarded-For", trusted: nil, peer: "198.51.100.9:4711",
			xff:  []string{"203.0.113.1", "", "203.0.113.3"},
			want: []string{"2", "1", "0"},
		},
		{
			name: "peer not among the trusted proxies", trusted: []string{"10.0.0.0/8"}, peer: "198.51.100.9:4711",
			xff:  []string{"203.0.113.1", "203.0.113.2", "203.0.113.3"},
			want: []string{"2", "1", "0"},
		},
		{
			name: "trusted proxy", trusted: []string{"10.0.0.0/8"}, peer: "10.1.2.3:4711",
			xff:  []string{"203.0.113.1", "203.0.113.2", "203.0.113.1", "1.2.3.4, 203.0.113.2"},
			want: []string{"2", "2", "1", "1"},
		},
		{
			// One IPv6 client holds a /64: its addresses share a bucket.
			name: "IPv6 clients by /64", trusted: []string{"10.0.0.0/8"}, peer: "10.1.2.3:4711",
			xff:  []string{"2001:db8:1:2::1", "2001:db8:1:2::ffff", "2001:db8:1:3::1"},
			want: []string{"2", "1", "2"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := newLimiter(t, three)
			r := gin.New()
			if err := r.SetTrustedProxies(tc.trusted); err != nil {
				t.Fatal(err)
			}
			r.GET("/x", tollgategin.New(l, tollgategin.WithTenant(tollgategin.TenantFromClientIP())), ok)
			for i, xff := range tc.xff {
				w := serve(r, "GET", "/x", func(req *http.Request) {
					req.RemoteAddr = tc.peer
					if xff != "" {
						req.Header.Set("X-Forwarded-For", xff)
					}
				})
				if got := w.Header().Get("X-RateLimit-Remaining"); w.Code != http.StatusOK || got != tc.want[i] {
					t.Errorf("request %d (X-Forwarded-For %q): status %d, remaining %q, want 200 and %q", i, xff, w.Code, got, tc.want[i])
				}
			}
		})
	}
}

// TestTenantFromClientIPOverHTTP checks the key through a real connection,
// whose peer is 127.0.0.1, not a trusted proxy.
func TestTenantFromClientIPOverHTTP(t *testing.T) {
	l, _ := newLimiter(t, three)
	r := gin.New()
	if err := r.SetTrustedProxies(nil); err != nil {
		t.Fatal(err)
	}
	r.GET("/x", tollgategin.New(l, tollgategin.WithTenant(tollgategin.TenantFromClientIP())), ok)
	srv := httptest.NewServer(r)
	defer srv.Close()
	for i, want := range []string{"2", "1"} {
		req, _ := http.NewRequest("GET", srv.URL+"/x", nil)
		req.Header.Set("X-Forwarded-For", "203.0.113."+string(rune('1'+i)))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if got := resp.Header.Get("X-RateLimit-Remaining"); got != want {
			t.Errorf("request %d: remaining %q, want %q: a spoofed X-Forwarded-For changed the key", i, got, want)
		}
	}
}

func TestRegistration(t *testing.T) {
	l, _ := newLimiter(t, three)
	limit := tollgategin.New(l)

	r := gin.New()
	r.GET("/open", ok)
	// A single route.
	r.GET("/single", limit, ok)
	// A group.
	api := r.Group("/api", limit)
	api.GET("/a", ok)
	api.GET("/b", ok)

	// The whole router.
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
		w := serve(tc.h, tc.method, tc.path, tenant("t-"+tc.path))
		if w.Code != http.StatusOK || w.Body.String() != "ok" {
			t.Errorf("%s %s: status %d body %q, want 200 ok", tc.method, tc.path, w.Code, w.Body)
		}
		if got := w.Header().Get("X-RateLimit-Limit") != ""; got != tc.limited {
			t.Errorf("%s %s: limited = %v, want %v", tc.method, tc.path, got, tc.limited)
		}
	}
	// The group's routes share each tenant's bucket.
	serve(r, "GET", "/api/b", tenant("shared"))
	if got := serve(r, "GET", "/api/a", tenant("shared")).Header().Get("X-RateLimit-Remaining"); got != "1" {
		t.Errorf("second request in the group: remaining %q, want 1", got)
	}
}

func TestCostPerRoute(t *testing.T) {
	l, _ := newLimiter(t, tollgate.Plan{Name: "ten", Limit: tollgate.Limit{Rate: 1, Burst: 10}})
	byMethod := tollgategin.WithCostFunc(func(c *gin.Context) int64 {
		if c.Request.Method == http.MethodPost {
			return 4
		}
		return 0 // counts as 1
	})
	r := gin.New()
	r.GET("/reports", tollgategin.New(l, byMethod), ok)
	r.POST("/reports", tollgategin.New(l, byMethod), ok)
	r.GET("/export", tollgategin.New(l, tollgategin.WithCost(3)), ok)

	for _, step := range []struct {
		method, path string
		status       int
		remaining    string
	}{
		{"GET", "/reports", 200, "9"},
		{"POST", "/reports", 200, "5"},
		{"GET", "/export", 200, "2"},
		{"GET", "/export", 429, "2"},
		{"POST", "/reports", 429, "2"},
		{"GET", "/reports", 200, "1"},
	} {
		w := serve(r, step.method, step.path, tenant("acme"))
		if w.Code != step.status || w.Header().Get("X-RateLimit-Remaining") != step.remaining {
			t.Fatalf("%s %s: status %d remaining %q, want %d and %q", step.method, step.path, w.Code,
				w.Header().Get("X-RateLimit-Remaining"), step.status, step.remaining)
		}
	}
}

func TestDenialBodyAndEvent(t *testing.T) {
	l, ev := newLimiter(t, three)
	r := gin.New()
	r.GET("/items/:id", tollgategin.New(l), ok)
	for i := 0; i < 3; i++ {
		serve(r, "GET", "/items/1", tenant("acme"))
	}
	w := serve(r, "GET", "/items/42", tenant("acme"))
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429", w.Code)
	}
	if w.Body.String() == "ok" || w.Header().Get("Retry-After") != "1" {
		t.Errorf("body %q Retry-After %q: the handler ran or Retry-After is missing", w.Body, w.Header().Get("Retry-After"))
	}
	var body tollgate.ResponseBody
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Error != tollgate.CodeRateLimited || body.RetryAfter != 1 {
		t.Errorf("body %q (%v), want rate_limited with retry_after 1", w.Body, err)
	}
	got := ev.All()
	if len(got) != 1 || got[0].Route != "/items/:id" || got[0].Method != "GET" || got[0].Tenant != "acme" {
		t.Errorf("throttle events %+v, want one for GET /items/:id of acme", got)
	}
}

func TestMissingTenantHandler(t *testing.T) {
	l, _ := newLimiter(t, three)
	r := gin.New()
	// Anonymous requests go through unlimited.
	r.GET("/public", tollgategin.New(l, tollgategin.WithMissingTenantHandler(func(*gin.Context) {})), ok)
	// Or get an answer of the application's own.
	r.GET("/private", tollgategin.New(l, tollgategin.WithMissingTenantHandler(func(c *gin.Context) {
		c.AbortWithStatusJSON(http.StatusForbidden, gin.H{"error": "log in"})
	})), ok)

	if w := serve(r, "GET", "/public", nil); w.Code != http.StatusOK || w.Body.String() != "ok" || w.Header().Get("X-RateLimit-Limit") != "" {
		t.Errorf("/public: status %d body %q limit %q, want an unlimited 200", w.Code, w.Body, w.Header().Get("X-RateLimit-Limit"))
	}
	if w := serve(r, "GET", "/private", nil); w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "log in") {
		t.Errorf("/private: status %d body %q, want the application's 403", w.Code, w.Body)
	}
}

func TestNilLimiter(t *testing.T) {
	r := gin.New()
	r.GET("/x", tollgategin.New(nil), ok)
	w := serve(r, "GET", "/x", tenant("acme"))
	if w.Code != http.StatusInternalServerError || strings.Contains(w.Body.String(), "nil") {
		t.Fatalf("status %d body %q, want 500 without the cause", w.Code, w.Body)
	}
	var body tollgate.ResponseBody
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Error != tollgate.CodeInternalError {
		t.Errorf("body %q, want internal_error", w.Body)
	}
}
