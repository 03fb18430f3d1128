package adaptertest

import (
	"encoding/json"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgate-go/tollgate/core/adapterkit"
)

// FieldParsers parse header values as RFC 9651 structured fields, for
// RunWith: each returns an error if value is not a valid field of its
// type. An adapter's test gives a parser written by others than tollgate
// (such as github.com/dunglas/httpsfv), so that the kit does not check
// tollgate's headers with tollgate's own reading of the RFC.
type FieldParsers struct {
	List func(value string) error // RateLimit, RateLimit-Policy
	Item func(value string) error // Retry-After and the X-RateLimit-* headers: Integers
}

var (
	listFields = []string{"RateLimit", "RateLimit-Policy"}
	itemFields = []string{"Retry-After", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}
)

// check parses every rate-limit header of h. It may run on any goroutine.
func (p *FieldParsers) check(t *testing.T, h http.Header) {
	t.Helper()
	for _, name := range listFields {
		// A List may come on several lines, which join with commas.
		if v := h.Values(name); len(v) > 0 {
			if err := p.List(strings.Join(v, ", ")); err != nil {
				t.Errorf("%s: %q is not an RFC 9651 List: %v", name, v, err)
			}
		}
	}
	for _, name := range itemFields {
		switch v := h.Values(name); {
		case len(v) > 1:
			t.Errorf("%s: %d lines %q, want one Item", name, len(v), v)
		case len(v) == 1:
			if err := p.Item(v[0]); err != nil {
				t.Errorf("%s: %q is not an RFC 9651 Item: %v", name, v[0], err)
			}
		}
	}
}

// wantProblem checks that r is an RFC 9457 problem details answer with the
// given status, and returns its members. A 429 must be of the problem type
// quota-exceeded, name its violated policies (each one a policy of its
// RateLimit-Policy header) and repeat its Retry-After, which it must have.
// It reports with Errorf only, so that it may run on any goroutine; the
// map is nil if the body is no JSON object.
func (k *kit) wantProblem(r response, status int) map[string]any {
	t := k.t
	t.Helper()
	if mt, _, err := mime.ParseMediaType(r.header.Get("Content-Type")); err != nil || mt != adapterkit.ProblemContentType {
		t.Errorf("Content-Type = %q, want %s", r.header.Get("Content-Type"), adapterkit.ProblemContentType)
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(r.body), &body); err != nil {
		t.Errorf("body %q is not a JSON object: %v", r.body, err)
		return nil
	}
	if strings.Contains(r.body, "secret") || strings.Contains(r.body, "10.1.2.3") {
		t.Errorf("body leaks internal error text: %s", r.body)
	}
	// RFC 9457, section 3.1: type is a URI reference, title and detail
	// strings, status the HTTP status.
	typ, ok := body["type"].(string)
	if u, err := url.Parse(typ); !ok || err != nil || u.Scheme == "" {
		t.Errorf("problem type %v is not an absolute URI (body %s)", body["type"], r.body)
	}
	for _, member := range []string{"title", "detail"} {
		if s, ok := body[member].(string); !ok || s == "" {
			t.Errorf("problem %s = %v, want a string (body %s)", member, body[member], r.body)
		}
	}
	if body["status"] != float64(status) || r.status != status {
		t.Errorf("status %d, problem status %v; want %d (body %s)", r.status, body["status"], status, r.body)
	}
	if status != http.StatusTooManyRequests {
		return body
	}
	if typ != adapterkit.ProblemQuotaExceeded {
		t.Errorf("problem type of a 429 = %q, want %q", typ, adapterkit.ProblemQuotaExceeded)
	}
	retry, err := strconv.ParseInt(r.header.Get("Retry-After"), 10, 64)
	if err != nil || retry < 1 {
		t.Errorf("Retry-After = %q on a 429, want whole seconds, at least 1", r.header.Get("Retry-After"))
	}
	if body["error"] != adapterkit.CodeRateLimited || body["retry_after"] != float64(retry) {
		t.Errorf("extension members error %v, retry_after %v; want %q and Retry-After's %d", body["error"], body["retry_after"], adapterkit.CodeRateLimited, retry)
	}
	violated, _ := body["violated-policies"].([]any)
	if len(violated) == 0 {
		t.Errorf("violated-policies = %v, want the names of the policies that denied (body %s)", body["violated-policies"], r.body)
	}
	policies := r.header.Get("RateLimit-Policy")
	named := false
	for _, v := range violated {
		name, ok := v.(string)
		if !ok || !strings.Contains(policies, strconv.Quote(name)+";") {
			t.Errorf("violated policy %v is not in RateLimit-Policy %q", v, policies)
		}
		named = named || name == body["policy"]
	}
	if !named {
		t.Errorf("policy %v is not among the violated policies %v", body["policy"], violated)
	}
	return body
}
