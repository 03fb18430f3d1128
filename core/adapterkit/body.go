package adapterkit

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// A Body is the body of an answer that middleware gives instead of the
// application: a denial, a missing or invalid tenant, or an internal error.
// It is an RFC 9457 problem details object (Content-Type
// application/problem+json): the members type, title, status and detail
// (the Message), the violated policies of a 429 as
// draft-ietf-httpapi-ratelimit-headers defines them, and tollgate's own
// fields as extension members. Every adapter renders it as its framework
// renders JSON, and every one of them gets the same bytes, from
// MarshalJSON. It never carries internal error text.
type Body struct {
	Error      string `json:"error"`                 // a stable code: rate_limited, unavailable, missing_tenant, invalid_tenant, internal_error
	Message    string `json:"message"`               // for humans; also the problem's detail
	RetryAfter int64  `json:"retry_after,omitempty"` // seconds, on rate_limited
	Policy     string `json:"policy,omitempty"`      // the policy that denied, on rate_limited

	// Type is the problem type's URI (ProblemQuotaExceeded on a 429); ""
	// means "about:blank", the problem the status code itself names.
	Type string `json:"type,omitempty"`

	// Title summarises the problem type; "" means the status's text.
	Title string `json:"title,omitempty"`

	// Status is the HTTP status the body is sent with.
	Status int `json:"status,omitempty"`

	// Violated names the policies that denied a request, separated by
	// commas ("free,free-daily"; a policy name never holds one): the
	// problem's "violated-policies". It is "" on other answers.
	Violated string `json:"-"`
}

// ProblemContentType is the media type of a Body: RFC 9457 problem
// details in JSON.
const ProblemContentType = "application/problem+json"

// The problem type and title of a 429, from
// draft-ietf-httpapi-ratelimit-headers: the request exceeds one or more
// quota policies, which the body's violated-policies member names.
const (
	ProblemQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	TitleQuotaExceeded   = "Request cannot be satisfied as assigned quota has been exceeded"
)

// aboutBlank is the problem type of the answers other than a 429: the
// status code says what the problem is (RFC 9457, section 4.2.1).
const aboutBlank = "about:blank"

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
	MissingTenantBody = Body{Error: CodeMissingTenant, Message: "no tenant: authenticate first", Status: http.StatusUnauthorized,
		Type: aboutBlank, Title: http.StatusText(http.StatusUnauthorized)}

	// InvalidTenantBody is the body of the answer, 400 Bad Request, to a
	// request whose tenant ID the Limiter refuses: longer than 256 bytes,
	// or holding a control character (tollgate.ErrInvalidTenant).
	InvalidTenantBody = Body{Error: CodeInvalidTenant, Message: "the tenant ID is too long or holds a control character", Status: http.StatusBadRequest,
		Type: aboutBlank, Title: http.StatusText(http.StatusBadRequest)}

	// InternalErrorBody is the body of the answer, 500, to a request the
	// Limiter could not decide on because of a configuration error; the
	// error itself is logged, not sent.
	InternalErrorBody = Body{Error: CodeInternalError, Message: "internal error", Status: http.StatusInternalServerError,
		Type: aboutBlank, Title: http.StatusText(http.StatusInternalServerError)}

	// CancelledBody is the body of the answer, 503, to a request held in
	// the delay mode whose context ended first; its client has gone.
	CancelledBody = Body{Error: CodeUnavailable, Message: "request cancelled while held", Status: http.StatusServiceUnavailable,
		Type: aboutBlank, Title: http.StatusText(http.StatusServiceUnavailable)}

	// unavailableBody answers a request that the failure policy denied.
	unavailableBody = Body{Error: CodeUnavailable, Message: "rate limiting is unavailable; try again later", Status: http.StatusServiceUnavailable,
		Type: aboutBlank, Title: http.StatusText(http.StatusServiceUnavailable)}
)

// Denial returns the HTTP status and the body for a denied d: 429 Too Many
// Requests, naming the retry time, the policy that denied and every policy
// that did (violated-policies), when a policy is exhausted; 503 Service
// Unavailable when the store failed under fail-closed, which leaves d
// without figures.
func Denial(d *tollgate.Decision) (int, Body) {
	if !d.HasFigures() {
		return http.StatusServiceUnavailable, unavailableBody
	}
	secs := RetryAfterSeconds(d.RetryAfter)
	retry := strconv.FormatInt(secs, 10)
	var msg string
	if slots, ok := inFlightCapacity(d); ok {
		// The unit says what the policy counts: requests that run at
		// once, which no wait of a known length frees.
		msg = "in-flight limit exceeded (" + d.Policy + ": " + strconv.FormatInt(slots, 10) + " " + UnitConcurrentRequests + "): retry in " + retry + "s"
	} else {
		msg = "rate limit exceeded (" + d.Policy + "): retry in " + retry + "s"
	}
	return http.StatusTooManyRequests, Body{
		Error:      CodeRateLimited,
		Message:    msg,
		RetryAfter: secs,
		Policy:     d.Policy,
		Type:       ProblemQuotaExceeded,
		Title:      TitleQuotaExceeded,
		Status:     http.StatusTooManyRequests,
		Violated:   violated(d),
	}
}

// inFlightCapacity returns the slots of the policy that d's figures
// describe, if it caps requests in flight.
func inFlightCapacity(d *tollgate.Decision) (int64, bool) {
	if d.PolicyKind() != "in-flight" {
		return 0, false
	}
	return d.Capacity(), true
}

// violated returns the names of the policies that denied d, joined by
// commas.
func violated(d *tollgate.Decision) string {
	policies, results := d.Policies(), d.Results()
	var b strings.Builder
	for i := range results {
		if results[i].Allowed || i >= len(policies) {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(policies[i].Name)
	}
	if b.Len() == 0 {
		return d.Policy
	}
	return b.String()
}

// ViolatedPolicies returns the names of the policies that Violated holds,
// in order; nil when it holds none.
func (b Body) ViolatedPolicies() []string {
	if b.Violated == "" {
		return nil
	}
	return strings.Split(b.Violated, ",")
}

// WriteJSON writes status and body as a problem details response to w:
// the net/http rendering of a Body.
func WriteJSON(w http.ResponseWriter, status int, body Body) {
	h := w.Header()
	h["Content-Type"] = problemContentType
	h["X-Content-Type-Options"] = nosniff
	w.WriteHeader(status)
	w.Write(body.AppendJSON(make([]byte, 0, 400)))
}

var (
	problemContentType = []string{ProblemContentType}
	nosniff            = []string{"nosniff"}
)

// MarshalJSON returns b as JSON, for the frameworks that render bodies with
// encoding/json or a package like it: the bytes of AppendJSON without its
// final newline.
func (b Body) MarshalJSON() ([]byte, error) {
	out := b.AppendJSON(make([]byte, 0, 400))
	return out[:len(out)-1], nil
}

// AppendJSON appends b encoded as JSON, with a final newline, to dst: the
// problem details members first (type, title, status, detail and, on a
// denial, violated-policies), then the extension members error, message,
// retry_after and policy. It costs no allocation beyond dst's growth; for
// the ASCII codes, messages and policy names of a Body, Go quoting and
// JSON quoting agree.
func (b Body) AppendJSON(dst []byte) []byte {
	typ, title := b.Type, b.Title
	if typ == "" {
		typ = aboutBlank
	}
	if title == "" {
		title = http.StatusText(b.Status)
	}
	dst = append(dst, `{"type":`...)
	dst = strconv.AppendQuoteToASCII(dst, typ)
	if title != "" {
		dst = append(dst, `,"title":`...)
		dst = strconv.AppendQuoteToASCII(dst, title)
	}
	if b.Status != 0 {
		dst = append(dst, `,"status":`...)
		dst = strconv.AppendInt(dst, int64(b.Status), 10)
	}
	dst = append(dst, `,"detail":`...)
	dst = strconv.AppendQuoteToASCII(dst, b.Message)
	if b.Violated != "" {
		dst = append(dst, `,"violated-policies":[`...)
		for i, name := range strings.Split(b.Violated, ",") {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendQuoteToASCII(dst, name)
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"error":`...)
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

// UnmarshalJSON reads a Body that MarshalJSON wrote, violated-policies
// included; the detail, which repeats the message, is not kept apart.
func (b *Body) UnmarshalJSON(data []byte) error {
	type plain Body // without this method
	var in struct {
		plain
		ViolatedPolicies []string `json:"violated-policies"`
	}
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	*b = Body(in.plain)
	b.Violated = strings.Join(in.ViolatedPolicies, ",")
	return nil
}
