package adapterkit

import (
	"net/http"
	"strconv"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// A Body is the JSON body of an answer that middleware gives instead of the
// application: a denial, a missing or invalid tenant, or an internal error.
// Every adapter renders it as its framework renders JSON, and every one of
// them gets the same bytes, from MarshalJSON. It never carries internal
// error text.
type Body struct {
	Error      string `json:"error"`                 // a stable code: rate_limited, unavailable, missing_tenant, invalid_tenant, internal_error
	Message    string `json:"message"`               // for humans
	RetryAfter int64  `json:"retry_after,omitempty"` // seconds, on rate_limited
	Policy     string `json:"policy,omitempty"`      // the policy that denied, on rate_limited
}

// The Body error codes.
const (
	CodeRateLimited   = "rate_limited"
	CodeUnavailable   = "unavailable"
	CodeMissingTenant = "missing_tenant"
	CodeInvalidTenant = "invalid_tenant"
	CodeInternalError = "internal_error"
)

// The bodies of the answers that do not depend on a decision.
var (
	// MissingTenantBody is the body of the default answer, 401
	// Unauthorized, to a request without a tenant.
	MissingTenantBody = Body{Error: CodeMissingTenant, Message: "no tenant: authenticate first"}

	// InvalidTenantBody is the body of the answer, 400 Bad Request, to a
	// request whose tenant ID the Limiter refuses: longer than 256 bytes,
	// or holding a control character (tollgate.ErrInvalidTenant).
	InvalidTenantBody = Body{Error: CodeInvalidTenant, Message: "the tenant ID is too long or holds a control character"}

	// InternalErrorBody is the body of the answer, 500, to a request the
	// Limiter could not decide on because of a configuration error; the
	// error itself is logged, not sent.
	InternalErrorBody = Body{Error: CodeInternalError, Message: "internal error"}

	// CancelledBody is the body of the answer, 503, to a request held in
	// the delay mode whose context ended first; its client has gone.
	CancelledBody = Body{Error: CodeUnavailable, Message: "request cancelled while held"}

	// unavailableBody answers a request that the failure policy denied.
	unavailableBody = Body{Error: CodeUnavailable, Message: "rate limiting is unavailable; try again later"}
)

// Denial returns the HTTP status and the body for a denied d: 429 Too Many
// Requests, naming the retry time and the policy that denied, when a policy
// is exhausted; 503 Service Unavailable when the store failed under
// fail-closed, which leaves d without figures.
func Denial(d *tollgate.Decision) (int, Body) {
	if !d.HasFigures() {
		return http.StatusServiceUnavailable, unavailableBody
	}
	secs := RetryAfterSeconds(d.RetryAfter)
	return http.StatusTooManyRequests, Body{
		Error:      CodeRateLimited,
		Message:    "rate limit exceeded (" + d.Policy + "): retry in " + strconv.FormatInt(secs, 10) + "s",
		RetryAfter: secs,
		Policy:     d.Policy,
	}
}

// WriteJSON writes status and body as a JSON response to w: the net/http
// rendering of a Body.
func WriteJSON(w http.ResponseWriter, status int, body Body) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["X-Content-Type-Options"] = nosniff
	w.WriteHeader(status)
	w.Write(body.AppendJSON(make([]byte, 0, 160)))
}

var (
	jsonContentType = []string{"application/json; charset=utf-8"}
	nosniff         = []string{"nosniff"}
)

// MarshalJSON returns b as JSON, for the frameworks that render bodies with
// encoding/json or a package like it: the bytes of AppendJSON without its
// final newline.
func (b Body) MarshalJSON() ([]byte, error) {
	out := b.AppendJSON(make([]byte, 0, 160))
	return out[:len(out)-1], nil
}

// AppendJSON appends b encoded as JSON, with a final newline, to dst. It
// costs no allocation beyond dst's growth; for the ASCII codes, messages
// and policy names of a Body, Go quoting and JSON quoting agree.
func (b Body) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"error":`...)
	dst = strconv.AppendQuoteToASCII(dst, b.Error)
	dst = append(dst, `,"message":`...)
	dst = strconv.AppendQuoteToASCII(dst, b.Message)
	if b.RetryAfter != 0 {
		dst = append(dst, `,"retry_after":`...)
		dst = strconv.AppendInt(dst, b.RetryAfter, 10)
	}
	if b.Policy != "" {
		dst = append(dst, `,"policy":`...)
		dst = strconv.AppendQuoteToASCII(dst, b.Policy)
	}
	return append(dst, "}\n"...)
}
