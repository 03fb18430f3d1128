package tollgate

import (
	"net/http"
	"strconv"
)

// A ResponseBody is the JSON body of an answer the middleware gives instead
// of the application: a denial, a missing tenant or an internal error. The
// adapters render it in their framework's idiom. It never carries internal
// error text.
type ResponseBody struct {
	Error      string `json:"error"`                 // a stable code: rate_limited, unavailable, missing_tenant, internal_error
	Message    string `json:"message"`               // for humans
	RetryAfter int64  `json:"retry_after,omitempty"` // seconds, on rate_limited
}

// The ResponseBody error codes.
const (
	CodeRateLimited   = "rate_limited"
	CodeUnavailable   = "unavailable"
	CodeMissingTenant = "missing_tenant"
	CodeInternalError = "internal_error"
)

// DenialStatus returns the HTTP status for a denied d: 429 Too Many Requests
// when the bucket is empty, 503 Service Unavailable when the store failed and
// the failure policy is FailClosed.
func (d *Decision) DenialStatus() int {
	if d.figures {
		return http.StatusTooManyRequests
	}
	return http.StatusServiceUnavailable
}

// DenialBody returns the JSON body for a denied d.
func (d *Decision) DenialBody() ResponseBody {
	if !d.figures {
		return ResponseBody{Error: CodeUnavailable, Message: "rate limiting is unavailable; try again later"}
	}
	secs := RetryAfterSeconds(d.RetryAfter)
	return ResponseBody{
		Error:      CodeRateLimited,
		Message:    "rate limit exceeded: retry in " + strconv.FormatInt(secs, 10) + "s",
		RetryAfter: secs,
	}
}

// MissingTenantBody is the body of the default answer, 401 Unauthorized, to a
// request without a tenant.
var MissingTenantBody = ResponseBody{Error: CodeMissingTenant, Message: "no tenant: authenticate first"}

// InternalErrorBody is the body of the answer, 500, to a request the Limiter
// could not decide on because of a configuration error (Take returned an
// error); the error itself is logged, not sent.
var InternalErrorBody = ResponseBody{Error: CodeInternalError, Message: "internal error"}

// WriteJSON writes status and body as a JSON response to w. It is the
// net/http rendering of a ResponseBody.
func WriteJSON(w http.ResponseWriter, status int, body ResponseBody) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["X-Content-Type-Options"] = nosniff
	w.WriteHeader(status)
	w.Write(body.appendJSON(make([]byte, 0, 128)))
}

var (
	jsonContentType = []string{"application/json; charset=utf-8"}
	nosniff         = []string{"nosniff"}
)

// appendJSON encodes b by hand, as encoding/json would cost allocations on
// the denial path; for the ASCII codes and messages of a ResponseBody, Go
// quoting and JSON quoting agree.
func (b ResponseBody) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"error":`...)
	dst = strconv.AppendQuote(dst, b.Error)
	dst = append(dst, `,"message":`...)
	dst = strconv.AppendQuote(dst, b.Message)
	if b.RetryAfter != 0 {
		dst = append(dst, `,"retry_after":`...)
		dst = strconv.AppendInt(dst, b.RetryAfter, 10)
	}
	return append(dst, "}\n"...)
}
