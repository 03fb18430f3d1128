package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/insights"
)

// The API's JSON. cmd/tollgate reads the same shapes: change them together.
type (
	// tenantState answers GET api/tenants/{tenant}, and every change.
	tenantState struct {
		Tenant   string        `json:"tenant"`
		Plan     string        `json:"plan"`    // the effective plan
		Allowed  bool          `json:"allowed"` // whether a request of cost 1 would be allowed now
		Override *overrideJSON `json:"override"`
		Policies []policyJSON  `json:"policies"`
	}
	policyJSON struct {
		Name         string  `json:"name"`
		Kind         string  `json:"kind"`           // "bucket" or "quota"
		Limit        int64   `json:"limit"`          // a bucket's burst, a quota's tokens
		Rate         float64 `json:"rate,omitempty"` // a bucket's tokens per second
		Period       string  `json:"period,omitempty"`
		Budget       string  `json:"budget,omitempty"`
		Remaining    int64   `json:"remaining"`
		ResetSeconds int64   `json:"reset_seconds"` // until it is full again
	}
	overrideJSON struct {
		Tenant    string      `json:"tenant"`
		Plan      string      `json:"plan"`
		Limits    []limitJSON `json:"limits,omitempty"`
		ExpiresAt *time.Time  `json:"expires_at"` // null: it does not expire
		Reason    string      `json:"reason"`
		SetBy     string      `json:"set_by"`
		SetAt     time.Time   `json:"set_at"`
	}
	// limitJSON is one policy's figures in a limits override: rate and
	// burst for a token bucket, tokens for a quota.
	limitJSON struct {
		Name   string  `json:"name"`
		Rate   float64 `json:"rate,omitempty"`
		Burst  int64   `json:"burst,omitempty"`
		Tokens int64   `json:"tokens,omitempty"`
	}
	changeJSON struct {
		Time      time.Time   `json:"time"`
		Tenant    string      `json:"tenant"`
		Action    string      `json:"action"` // "override", "clear" or "reset"
		Plan      string      `json:"plan,omitempty"`
		Limits    []limitJSON `json:"limits,omitempty"`
		ExpiresAt *time.Time  `json:"expires_at,omitempty"`
		Reason    string      `json:"reason"`
		By        string      `json:"by"`
	}
	overrideRequest struct {
		Plan             string      `json:"plan"`
		Limits           []limitJSON `json:"limits"`
		ExpiresInSeconds *int64      `json:"expires_in_seconds"`
		Reason           string      `json:"reason"`
	}
	resetRequest struct {
		Reason string `json:"reason"`
	}
)

func (h *handler) api(w http.ResponseWriter, r *http.Request, c credential, segs []string) {
	ctx := r.Context()
	tenantPath := len(segs) >= 2 && segs[0] == "tenants"
	switch {
	case tenantPath && len(segs) == 2:
		if allow(w, r, http.MethodGet) {
			h.answerState(w, ctx, segs[1], http.StatusOK)
		}
	case tenantPath && len(segs) == 3 && segs[2] == "override":
		if !allow(w, r, http.MethodPut, http.MethodDelete) || !h.checkChange(w, r, c, r.Header.Get("X-CSRF-Token")) {
			return
		}
		if r.Method == http.MethodPut {
			h.putOverride(w, r, c, segs[1])
		} else {
			h.deleteOverride(w, r, c, segs[1])
		}
	case tenantPath && len(segs) == 3 && segs[2] == "reset":
		if !allow(w, r, http.MethodPost) || !h.checkChange(w, r, c, r.Header.Get("X-CSRF-Token")) {
			return
		}
		var req resetRequest
		if err := decode(r, &req, true); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		h.change(w, ctx, tollgate.Change{Tenant: segs[1], Action: "reset", Reason: req.Reason, By: c.label})
	case len(segs) == 1 && segs[0] == "overrides":
		if allow(w, r, http.MethodGet) {
			list, err := h.overrides(ctx)
			if err != nil {
				h.failed(w, err)
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"overrides": list})
		}
	case len(segs) == 1 && segs[0] == "changes":
		if allow(w, r, http.MethodGet) {
			list, err := h.changes(ctx)
			if err != nil {
				h.failed(w, err)
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"changes": list})
		}
	case len(segs) == 1 && segs[0] == "candidates":
		if !allow(w, r, http.MethodGet) {
			return
		}
		if h.tracker == nil {
			writeError(w, http.StatusNotFound, "this application tracks no upgrade candidates (the admin handler has no insights Tracker)")
			return
		}
		win, n, err := window(r)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		rep, err := h.tracker.Candidates(ctx, win, n)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, rep)
	default:
		writeError(w, http.StatusNotFound, "no such API endpoint: see tenants/{tenant}, tenants/{tenant}/override, tenants/{tenant}/reset, overrides, changes and candidates")
	}
}

// allow reports whether r's method is one of methods (GET includes HEAD),
// or answers 405.
func allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	m := r.Method
	if m == http.MethodHead {
		m = http.MethodGet
	}
	if slices.Contains(methods, m) {
		return true
	}
	if slices.Contains(methods, http.MethodGet) {
		methods = append(methods, http.MethodHead)
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s is not allowed here: use %s", truncate(r.Method, 20), strings.Join(methods, " or ")))
	return false
}

func (h *handler) putOverride(w http.ResponseWriter, r *http.Request, c credential, tenant string) {
	var req overrideRequest
	if err := decode(r, &req, false); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	var expiresIn time.Duration
	if req.ExpiresInSeconds != nil {
		n := *req.ExpiresInSeconds
		if n <= 0 || n > int64(maxExpiry/time.Second) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf(
				"expires_in_seconds must be 1 to %d (leave it out for an override that does not expire), got %d", int64(maxExpiry/time.Second), n))
			return
		}
		expiresIn = time.Duration(n) * time.Second
	}
	change, err := h.overrideChange(r.Context(), tenant, req.Plan, req.Limits, expiresIn, req.Reason, c)
	if err != nil {
		h.failed(w, err)
		return
	}
	h.change(w, r.Context(), change)
}

// overrideChange builds the Change that overrides tenant's limits, checked
// as far as the Limiter does not check it itself.
func (h *handler) overrideChange(ctx context.Context, tenant, plan string, limits []limitJSON, expiresIn time.Duration, reason string, c credential) (tollgate.Change, error) {
	ch := tollgate.Change{Tenant: tenant, Action: "override", Reason: reason, By: c.label,
		Override: tollgate.Override{Plan: plan}}
	if plan == "" && len(limits) == 0 {
		return ch, fmt.Errorf("%w: an override needs a plan, or limits: [{\"name\": ..., \"rate\": ..., \"burst\": ...} or {\"name\": ..., \"tokens\": ...}]", tollgate.ErrInvalidLimit)
	}
	var err error
	if ch.Override.Limits, err = policies(limits); err != nil {
		return ch, err
	}
	if expiresIn > 0 {
		// The wall clock, as the Limiter's: the expiry is a time on
		// every replica's clock.
		ch.Override.ExpiresAt = time.Now().Add(expiresIn)
	}
	return ch, h.checkPolicyNames(ctx, ch)
}

// A requestError is a mistake of the request that no error of the
// Limiter's names.
type requestError struct{ error }

// overrideSuffix marks the plan of a tenant whose figures an override
// changes ("free+override"); its own bucket is still named "free" in a
// limits override.
const overrideSuffix = "+override"

// policies converts the limits of an override request.
func policies(limits []limitJSON) ([]tollgate.Policy, error) {
	if len(limits) > 17 { // a plan's bucket and at most 16 policies
		return nil, fmt.Errorf("%w: limits: at most 17, got %d", tollgate.ErrInvalidLimit, len(limits))
	}
	var out []tollgate.Policy
	for i, l := range limits {
		name := strings.TrimSuffix(l.Name, overrideSuffix)
		bucket := l.Rate != 0 || l.Burst != 0
		switch {
		case name == "":
			return nil, fmt.Errorf("%w: limits[%d]: name must name the policy to change (the plan's own bucket is named after the plan)", tollgate.ErrInvalidLimit, i)
		case bucket == (l.Tokens != 0):
			return nil, fmt.Errorf("%w: limits[%d] (%q): give rate and burst (a token bucket) or tokens (a quota), not both", tollgate.ErrInvalidLimit, i, truncate(name, 80))
		case bucket:
			lim := tollgate.Limit{Rate: l.Rate, Burst: l.Burst}
			if err := lim.Validate(); err != nil {
				return nil, fmt.Errorf("limits[%d] (%q): %w", i, truncate(name, 80), err)
			}
			out = append(out, tollgate.Policy{Name: name, Limit: lim})
		case l.Tokens < 1:
			return nil, fmt.Errorf("%w: limits[%d] (%q): tokens must be >= 1, got %d", tollgate.ErrInvalidLimit, i, truncate(name, 80), l.Tokens)
		default:
			out = append(out, tollgate.Policy{Name: name, Quota: tollgate.Quota{Tokens: l.Tokens}})
		}
	}
	return out, nil
}

// checkPolicyNames refuses a limits override that names a policy the
// tenant's plan does not have, which the Limiter would accept and then
// ignore. It can tell only while the tenant has no plan override: the
// Limiter shows its own plan's policies then. With a Plan, the Limiter
// checks the names itself.
func (h *handler) checkPolicyNames(ctx context.Context, ch tollgate.Change) error {
	if ch.Override.Plan != "" || len(ch.Override.Limits) == 0 {
		return nil
	}
	current, err := h.limiter.Overrides(ctx)
	if err != nil {
		return err
	}
	for _, o := range current {
		if o.Tenant == ch.Tenant && o.Override.Plan != "" {
			return nil
		}
	}
	d, err := h.limiter.Inspect(ctx, ch.Tenant)
	if err != nil {
		return err
	}
	var names []string
	for _, p := range d.Policies() {
		names = append(names, strings.TrimSuffix(p.Name, overrideSuffix))
	}
	for i, l := range ch.Override.Limits {
		if !slices.Contains(names, l.Name) {
			return fmt.Errorf("%w: limits[%d]: the tenant's plan has no policy %q; it has %s",
				tollgate.ErrInvalidLimit, i, truncate(l.Name, 80), strings.Join(names, ", "))
		}
	}
	return nil
}

func (h *handler) deleteOverride(w http.ResponseWriter, r *http.Request, c credential, tenant string) {
	q := r.URL.Query()
	for k := range q {
		if k != "reason" {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("unknown query parameter %q: DELETE takes only reason", truncate(k, 40)))
			return
		}
	}
	if r.ContentLength > 0 {
		writeError(w, http.StatusBadRequest, "DELETE takes no body: give the reason as ?reason=...")
		return
	}
	h.change(w, r.Context(), tollgate.Change{Tenant: tenant, Action: "clear", Reason: q.Get("reason"), By: c.label})
}

// change applies ch and answers with the tenant's new state.
func (h *handler) change(w http.ResponseWriter, ctx context.Context, ch tollgate.Change) {
	if err := h.apply(ctx, ch); err != nil {
		h.failed(w, err)
		return
	}
	h.answerState(w, ctx, ch.Tenant, http.StatusOK)
}

// apply applies an operator's change; the Limiter logs it with its reason
// and the credential's label (By).
func (h *handler) apply(ctx context.Context, ch tollgate.Change) error {
	if err := checkReason(ch.Reason); err != nil {
		return requestError{err}
	}
	return h.limiter.Apply(ctx, ch)
}

func (h *handler) answerState(w http.ResponseWriter, ctx context.Context, tenant string, status int) {
	st, err := h.state(ctx, tenant)
	if err != nil {
		h.failed(w, err)
		return
	}
	writeJSON(w, status, st)
}

// state inspects tenant, spending nothing.
func (h *handler) state(ctx context.Context, tenant string) (tenantState, error) {
	// Overrides reads the store's overrides first, so that Inspect
	// applies those in force now, whichever replica set them.
	list, err := h.overrides(ctx)
	if err != nil {
		return tenantState{}, err
	}
	d, err := h.limiter.Inspect(ctx, tenant)
	if err != nil {
		return tenantState{}, err
	}
	st := tenantState{Tenant: tenant, Plan: d.Plan, Allowed: d.Allowed, Policies: []policyJSON{}}
	for i := range list {
		if list[i].Tenant == tenant {
			st.Override = &list[i]
		}
	}
	results := d.Results()
	for i, p := range d.Policies() {
		pj := policyJSON{Name: p.Name, Kind: "bucket", Limit: p.Limit.Burst, Rate: p.Limit.Rate, Budget: p.Budget}
		if !p.Quota.IsZero() {
			pj.Kind, pj.Limit, pj.Rate, pj.Period = "quota", p.Quota.Tokens, 0, p.Quota.Period.String()
		}
		if i < len(results) {
			pj.Remaining = results[i].Remaining
			pj.ResetSeconds = int64(math.Ceil(results[i].ResetAfter.Seconds()))
		}
		st.Policies = append(st.Policies, pj)
	}
	return st, nil
}

// overrides returns the overrides in force; none if the store keeps none.
func (h *handler) overrides(ctx context.Context) ([]overrideJSON, error) {
	list, err := h.limiter.Overrides(ctx)
	if errors.Is(err, errors.ErrUnsupported) {
		return []overrideJSON{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]overrideJSON, len(list))
	for i, c := range list {
		out[i] = overrideJSON{Tenant: c.Tenant, Plan: c.Override.Plan, Limits: limitsJSON(c.Override.Limits),
			ExpiresAt: timeOrNil(c.Override.ExpiresAt), Reason: c.Reason, SetBy: c.By, SetAt: c.Time.UTC()}
	}
	return out, nil
}

// changes returns the change log, newest first.
func (h *handler) changes(ctx context.Context) ([]changeJSON, error) {
	list, err := h.limiter.Changes(ctx)
	if errors.Is(err, errors.ErrUnsupported) {
		return []changeJSON{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]changeJSON, len(list))
	for i, c := range list {
		out[i] = changeJSON{Time: c.Time.UTC(), Tenant: c.Tenant, Action: c.Action, Plan: c.Override.Plan,
			Limits: limitsJSON(c.Override.Limits), ExpiresAt: timeOrNil(c.Override.ExpiresAt), Reason: c.Reason, By: c.By}
	}
	return out, nil
}

func limitsJSON(ps []tollgate.Policy) []limitJSON {
	var out []limitJSON
	for _, p := range ps {
		if p.Quota.IsZero() {
			out = append(out, limitJSON{Name: p.Name, Rate: p.Limit.Rate, Burst: p.Limit.Burst})
		} else {
			out = append(out, limitJSON{Name: p.Name, Tokens: p.Quota.Tokens})
		}
	}
	return out
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// failed answers err: 400 for the request's mistakes, 501 for a store that
// keeps no overrides, 503 for a store that failed.
func (h *handler) failed(w http.ResponseWriter, err error) {
	switch {
	case errors.As(err, new(requestError)):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, tollgate.ErrUnknownPlan), errors.Is(err, tollgate.ErrInvalidLimit), errors.Is(err, tollgate.ErrInvalidTenant):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, errors.ErrUnsupported):
		writeError(w, http.StatusNotImplemented, "the Limiter's store keeps no overrides: "+err.Error())
	default:
		writeError(w, http.StatusServiceUnavailable, "the rate limiter's store failed: "+err.Error())
	}
}

// decode reads r's body, one JSON object with none but v's fields, into v;
// an empty body is allowed if optional.
func decode(r *http.Request, v any, optional bool) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooLarge *http.MaxBytesError
		switch {
		case err == io.EOF && optional:
			return nil
		case err == io.EOF:
			return errors.New("the body is empty: want a JSON object")
		case errors.As(err, &tooLarge):
			return fmt.Errorf("the body is larger than %d bytes", maxBodyBytes)
		}
		return fmt.Errorf("the body is not the JSON object wanted: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("the body holds more than one JSON object")
	}
	return nil
}

// window reads the window and n query parameters of a candidates list.
func window(r *http.Request) (insights.Window, int, error) {
	q := r.URL.Query()
	win := insights.LastDay
	if s := q.Get("window"); s != "" {
		w, err := insights.ParseWindow(s)
		if err != nil {
			return "", 0, err
		}
		win = w
	}
	n := insights.DefaultCandidates
	if s := q.Get("n"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > insights.MaxCandidates {
			return "", 0, fmt.Errorf("n must be 1 to %d, got %q", insights.MaxCandidates, truncate(s, 40))
		}
		n = v
	}
	return win, n, nil
}

// truncate shortens s for an error message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
