// Package tollgatechi limits requests to a chi router per tenant with a
// tollgate.Limiter.
//
// chi middleware is plain net/http middleware, so Middleware is
// tollgatehttp.Middleware with one thing of chi's own: events, logs and
// metrics name the route by its chi route pattern ("/api/users/{id}"),
// which Middleware finds even when it runs before chi has routed the
// request, as it does when registered with Router.Use. Every
// tollgatehttp.Option applies, with the meaning tollgatehttp.Spec gives it:
// tollgatehttp.WithTenant (tollgatehttp.TenantFromContext for a tenant set
// by the application's authentication middleware,
// tollgatehttp.TenantFromClientIP for anonymous clients),
// tollgatehttp.WithCost, tollgatehttp.WithBudget, tollgatehttp.WithSkip,
// tollgatehttp.WithMaxDelay (hold a request slightly over its rate instead
// of answering 429), tollgatehttp.WithDenyHandler and
// tollgatehttp.WithMissingTenantHandler.
//
// Register it on a router, a group, a sub-router or a single route:
//
//	r.Use(tollgatechi.Middleware(l))
//	r.With(tollgatechi.Middleware(l, tollgatehttp.WithCost(10))).Post("/reports", createReport)
package tollgatechi

import (
	"net/http"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/tollgatehttp"
)

// Middleware returns chi middleware that limits each request with l: it
// sets the rate-limit headers on every limited response, answers a denied
// request with 429 (or 503 under tollgate.FailClosed when the store is down)
// and a JSON body, and passes allowed requests on. It names routes with
// RoutePattern unless tollgatehttp.WithRoute says otherwise.
//
// A nil l is a configuration error: as with tollgatehttp.Middleware, it is
// logged at once and every request is answered 500, rather than panic or
// let requests through unlimited.
func Middleware(l *tollgate.Limiter, opts ...tollgatehttp.Option) func(http.Handler) http.Handler {
	all := make([]tollgatehttp.Option, 0, len(opts)+1)
	all = append(all, tollgatehttp.WithRoute(RoutePattern))
	return tollgatehttp.Middleware(l, append(all, opts...)...)
}

// RoutePattern returns the chi route pattern that r matches, such as
// "/api/users/{id}", or "" when it matches no route, so that scans of made-up
// paths do not multiply the routes in logs. Outside a chi router it returns
// r.Pattern.
//
// chi knows the full pattern only once it has routed the request to its
// endpoint, which middleware registered with Use runs before; RoutePattern
// then looks the request up in the router's tree, as chi will.
func RoutePattern(r *http.Request) string {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil {
		return r.Pattern
	}
	// After routing to an endpoint (middleware added with With or Group,
	// or inside the handler), chi has set r.Pattern to the full pattern.
	// A last pattern ending in "*" is a mount point, or a wildcard route
	// that can not be told from one: look those up.
	if n := len(rctx.RoutePatterns); n > 0 && !strings.HasSuffix(rctx.RoutePatterns[n-1], "*") && r.Pattern != "" {
		return r.Pattern
	}
	return find(rctx, r)
}

// findContexts holds scratch routing contexts for find: Routes.Find records
// its search in one, and a fresh one a request would cost an allocation.
var findContexts = sync.Pool{New: func() any { return chi.NewRouteContext() }}

// find looks r up in the tree of the router that received it first.
func find(rctx *chi.Context, r *http.Request) string {
	if rctx.Routes == nil {
		return ""
	}
	method := rctx.RouteMethod
	if method == "" {
		method = r.Method
	}
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	if path == "" {
		path = "/"
	}
	x := findContexts.Get().(*chi.Context)
	x.Reset()
	p := rctx.Routes.Find(x, method, path)
	x.Reset()
	findContexts.Put(x)
	// Find joins the patterns of nested routers as they were written;
	// chi's own RoutePattern drops a trailing slash.
	if len(p) > 1 {
		p = strings.TrimSuffix(p, "/")
	}
	return p
}
