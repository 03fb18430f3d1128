// Package tollgatechi limits requests to a chi router per tenant with a
// tollgate.Limiter.
//
// chi middleware is plain net/http middleware, so Middleware is
// tollgatehttp.Middleware with one thing of chi's own: logs and metrics
// name the route by its chi route pattern ("/api/users/{id}"), which
// Middleware finds even when it runs before chi has routed the request, as
// it does when registered with Router.Use. Every tollgatehttp.Option
// applies, with the meaning it has in every tollgate adapter:
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
	"maps"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-chi/chi/v5"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/tollgatehttp"
)

// Middleware returns chi middleware that limits each request with l: it
// sets the rate-limit headers on every limited response, answers a denied
// request with 429 (or 503 under tollgate.WithFailClosed when the store is
// down) and a JSON body, and passes allowed requests on. It names routes
// with RoutePattern unless tollgatehttp.WithRoute says otherwise.
//
// A nil l is a configuration error: as with tollgatehttp.Middleware, it is
// logged at once and every request is answered 500, rather than panic or
// let requests through unlimited. So is a budget no plan has.
func Middleware(l *tollgate.Limiter, opts ...tollgatehttp.Option) func(http.Handler) http.Handler {
	static := &staticRoutes{}
	all := make([]tollgatehttp.Option, 0, len(opts)+1)
	all = append(all, tollgatehttp.WithRoute(func(r *http.Request) string { return routePattern(r, static) }))
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
func RoutePattern(r *http.Request) string { return routePattern(r, nil) }

func routePattern(r *http.Request, static *staticRoutes) string {
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
	if static.has(rctx.Routes, method, path) {
		return path
	}
	p := find(rctx.Routes, method, path)
	if p == path {
		static.add(rctx.Routes, method, path)
	}
	return p
}

// findContexts holds scratch routing contexts for find: Routes.Find records
// its search in one, and a fresh one a request would cost an allocation.
var findContexts = sync.Pool{New: func() any { return chi.NewRouteContext() }}

// find looks the request for path up in routes, the tree of the router
// that received it first.
func find(routes chi.Routes, method, path string) string {
	x := findContexts.Get().(*chi.Context)
	x.Reset()
	p := routes.Find(x, method, path)
	x.Reset()
	findContexts.Put(x)
	// Find joins the patterns of nested routers as they were written;
	// chi's own RoutePattern drops a trailing slash.
	if len(p) > 1 {
		p = strings.TrimSuffix(p, "/")
	}
	return p
}

// staticRoutes remembers, for the middleware of one Middleware call, the
// paths of one router that are routes without parameters: the pattern of
// such a path is the path itself, which a lookup in a small map finds for
// a fraction of what chi's tree search costs, on each request whose route
// is read (see tollgatehttp.WithRoute) of middleware registered with Use.
// Only such paths are kept, so there are at most as many as the router has
// routes; paths that match a pattern with parameters, or none, are looked
// up in the tree each time. The zero staticRoutes is empty; a nil one
// keeps nothing.
type staticRoutes struct {
	mu   sync.Mutex // serialises writers
	seen atomic.Pointer[routeSet]
}

// A routeSet is the static paths of one router, by method. It is copied on
// write: reads take no lock.
type routeSet struct {
	routes chi.Routes
	paths  [len(cachedMethods)]map[string]struct{}
}

// cachedMethods are the methods whose static paths are remembered.
var cachedMethods = [...]string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodHead}

func methodIndex(method string) int {
	for i, m := range cachedMethods {
		if m == method {
			return i
		}
	}
	return -1
}

// maxStaticRoutes bounds a routeSet against routers that add routes as
// they go.
const maxStaticRoutes = 4096

func (s *staticRoutes) has(routes chi.Routes, method, path string) bool {
	if s == nil {
		return false
	}
	set, m := s.seen.Load(), methodIndex(method)
	if set == nil || m < 0 || set.routes != routes {
		return false
	}
	_, ok := set.paths[m][path]
	return ok
}

func (s *staticRoutes) add(routes chi.Routes, method, path string) {
	m := methodIndex(method)
	if s == nil || m < 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.seen.Load()
	if old == nil {
		old = &routeSet{routes: routes}
	}
	if old.routes != routes || len(old.paths[m]) >= maxStaticRoutes {
		// Middleware shared by two routers remembers the first one's.
		return
	}
	set := *old
	set.paths[m] = maps.Clone(old.paths[m])
	if set.paths[m] == nil {
		set.paths[m] = map[string]struct{}{}
	}
	set.paths[m][path] = struct{}{}
	s.seen.Store(&set)
}
