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
// the Decision out on every request.
var TakeInto func(ctx context.Context, l, req, d, op any) error
