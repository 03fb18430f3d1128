package tollgatehttp

import (
	"context"
	"errors"
	"net/http"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// An Answer is what middleware does with one request: pass it on (Status 0)
// or answer it with Status and Body. Decision is the Limiter's decision; its
// headers belong on the response either way.
type Answer struct {
	Decision tollgate.Decision
	Status   int
	Body     ResponseBody
}

// Denied reports whether a answers a denied request: 429 with a policy
// exhausted, or 503 with the store down under FailClosed. Adapters give
// these to the application's replacement for the denial answer.
func (a *Answer) Denied() bool {
	return a.Status != 0 && (a.Body.Error == CodeRateLimited || a.Body.Error == CodeUnavailable)
}

// MissingTenant reports whether a answers a request without a tenant.
func (a *Answer) MissingTenant() bool {
	return a.Body.Error == CodeMissingTenant
}

// Decide decides on req with l for middleware and writes the answer into a:
// 401 with MissingTenantBody when req.Tenant is empty, 400 with
// InvalidTenantBody when it is too long, the denial status and body when the
// Limiter denies, and 500 with InternalErrorBody when it can not decide for
// a configuration error, which the Limiter logs.
func Decide(ctx context.Context, l *tollgate.Limiter, req *tollgate.Request, a *Answer) {
	a.Status = 0
	if req.Tenant == "" {
		a.Decision = tollgate.Decision{}
		a.Status, a.Body = http.StatusUnauthorized, MissingTenantBody
		return
	}
	if err := l.Decide(ctx, req, &a.Decision); err != nil {
		if errors.Is(err, tollgate.ErrInvalidTenant) {
			a.Status, a.Body = http.StatusBadRequest, InvalidTenantBody
			return
		}
		a.Status, a.Body = http.StatusInternalServerError, InternalErrorBody
		return
	}
	if !a.Decision.Allowed {
		a.Status, a.Body = DenialStatus(&a.Decision), DenialBody(&a.Decision)
	}
}
