package tollgatehttp

import (
	"net/http"
	"strconv"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// A ResponseBody is the JSON body of an answer the middleware gives instead
// of the application: a denial, a missing or invalid tenant, or an internal
// error. The adapters render it in their framework's idiom. It never carries
// internal error text.
type ResponseBody struct {
	Error      string `json:"error"`                 // a stable code: rate_limited, unavailable, missing_tenant, invalid_tenant, internal_error
	Message    string `json:"message"`               // for humans
	RetryAfter int64  `json:"retry_after,omitempty"` // seconds, on rate_limited
	Policy     string `json:"policy,omitempty"`      // the policy that denied, on rate_limited
}

// The ResponseBody error codes.
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
	MissingTenantBody = ResponseBody{Error: CodeMissingTenant, Message: "no tenant: authenticate first"}

	// InvalidTenantBody is the body of the answer, 400 Bad Request, to a
	// request whose tenant ID is longer than tollgate.MaxTenantLength.
	InvalidTenantBody = ResponseBody{Error: CodeInvalidTenant, Message: "the tenant ID is too long"}

	// InternalErrorBody is the body of the answer, 500, to a request the
	// Limiter could not decide on because of a configuration error; the
	// error itself is logged, not sent.
	InternalErrorBody = ResponseBody{Error: CodeInternalError, Message: "internal error"}
)

// DenialStatus returns the HTTP status for a denied d: 429 Too Many Requests
// when a policy is exhausted, 503 Service Unavailable when the store failed
// and the failure policy is FailClosed.
func DenialStatus(d *tollgate.Decision) int {
	if d.HasFigures() {
		return http.StatusTooManyRequests
	}
	return http.StatusServiceUnavailable
}

// DenialBody returns the JSON body for a denied d, naming the retry time and
// the policy that denied.
func DenialBody(d *tollgate.Decision) ResponseBody {
	if !d.HasFigures() {
		return ResponseBody{Error: CodeUnavailable, Message: "rate limiting is unavailable; try again later"}
	}
	secs := RetryAfterSeconds(d.RetryAfter)
	return ResponseBody{
		Error:      CodeRateLimited,
		Message:    "rate limit exceeded (" + d.Policy + "): retry in " + strconv.FormatInt(secs, 10) + "s",
		RetryAfter: secs,
		Policy:     d.Policy,
	}
}

// WriteJSON writes status and body as a JSON response to w. It is the
// net/http rendering of a ResponseBody.
func WriteJSON(w http.ResponseWriter, status int, body ResponseBody) {
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

// AppendJSON appends b encoded as JSON, with a final newline, to dst. It
// costs no allocation beyond dst's growth, where encoding/json would cost
// several on the denial path; for the ASCII codes, messages and policy
// names of a ResponseBody, Go quoting and JSON quoting agree.
func (b ResponseBody) AppendJSON(dst []byte) []byte {
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
