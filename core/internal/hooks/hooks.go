// Package hooks gives the module's own packages what the engine keeps out
// of its public API: the test kits (adaptertest, storetest) a Limiter's test
// clock, and the HTTP layer a memo per plan for its header values and a
// way to decide into a Decision of its own. The engine fills the variables
// in at init; their types use any to keep this package free of imports of
// the engine.
package hooks

import (
	"context"
	"sync/atomic"
	"time"
)

// LimiterClock returns a tollgate.Option that makes a Limiter read the time
// of its decisions from now.
var LimiterClock func(now func() time.Time) any

// PolicyMemo returns the memo of the policies of d, a *tollgate.Decision:
// one value per compiled plan and budget, for what the HTTP layer derives
// from the policies alone. It returns nil for a decision without figures.
var PolicyMemo func(d any) *atomic.Value

// TakeInto is l.Take(ctx, *req) into d, asking the store with op, where l
// is a *tollgate.Limiter, req a *tollgate.Request, d a *tollgate.Decision
// and op a *storekit.Op: the HTTP layer decides into answers it reuses,
// which spares it a Decision and an Op from the engine's pool and copying
// the Decision out on every request. It does not tell l's Observers of d:
// Observe does, once the caller has named the route if they need it.
var TakeInto func(ctx context.Context, l, req, d, op any) error

// Observe tells the Observers of l, a *tollgate.Limiter, of d, a
// *tollgate.Decision that TakeInto made.
var Observe func(ctx context.Context, l, d any)

// RouteAlways reports whether l, a *tollgate.Limiter, has Observers that
// may read the route of every decision. Without them, only its own log
// does, and only of a decision that was not simply allowed: the HTTP
// layer then names the route only for such a decision, after TakeInto,
// sparing the router's lookup on every other request.
var RouteAlways func(l any) bool
