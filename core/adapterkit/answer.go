package adapterkit

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unsafe"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/internal/hooks"
	"github.com/tollgate-go/tollgate/core/storekit"
)

// A request's way through the kit is this file alone, the Answer to it:
// Decide reads the tenant, decides, and writes the headers, so that a
// request enters the kit once.

// A Call is what an adapter reads of a request from its framework's
// context before the Handler decides on it. Adapters declare one and set
// its fields one by one: Go builds a composite literal aside and copies
// it, and the copy, reading back words just written, stalls the CPU.
type Call struct {
	Context context.Context // the request's context, for the store
	Method  string          // the request method, for logs and metrics
	Route   string          // the route pattern the framework matched, unless Spec.Route names it

	// Header holds the request's headers, where the default tenant is
	// read (TenantHeader) when the Spec has no Tenant function. Frameworks
	// without an http.Header leave it nil and set Tenant instead, to the
	// value of that header (or metadata key), copied if need be.
	Header http.Header
	Tenant string
}

// Headers is where Decide puts the rate-limit headers of a decision: into
// Map, the response's header map (see WriteHeaders), or, for frameworks
// without an http.Header, through Set, which it calls with each header
// (see VisitHeaders). It is not part of the Call, whose strings the
// decision keeps: Set, often a closure, would have to live on the heap.
type Headers struct {
	Map http.Header
	Set func(name, value string)
}

// An Answer is what middleware does with one request: pass it on (Status 0)
// or answer it with Status and Body. Decision is the Limiter's decision;
// its headers belong on the response either way. Answers are reused: see
// Release.
type Answer struct {
	Decision tollgate.Decision
	Status   int
	Body     Body

	req     tollgate.Request // what Decision was decided on
	op      storekit.Op      // what the store was asked
	limiter *tollgate.Limiter
	ctx     context.Context // the request's, for the store when the slot goes back
}

// answers are reused, so that neither an Answer nor its Decision and Op
// are allocated anew for each request: a Decision is too big to be cheap.
var answers = sync.Pool{New: func() any { return new(Answer) }}

// Release gives back the slot that a's decision holds in the in-flight
// policies of its plan (tollgate.Policy.InFlight), if it holds one, and
// hands a back for reuse. Call it when the request has ended: after the
// application's handler has returned, in a deferred call, so that a panic
// in the handler gives the slot back too. Neither a nor its Decision may
// be used after. A deny handler's copy of the Decision stays valid.
//
// The slot goes back even when the request's context has ended (its
// client went away): the store is called without the context's
// cancellation. Should the store fail, the slot's lease expires on its
// own (see tollgate.Policy.InFlight).
func (a *Answer) Release() {
	if a.Decision.Allowed && holdsSlots(&a.Decision) {
		_ = a.limiter.Release(context.WithoutCancel(a.ctx), &a.Decision)
	}
	a.limiter, a.ctx = nil, nil
	answers.Put(a)
}

// holdsSlots reports whether d's plan has in-flight policies, whose slot
// an allowed d may hold: the others cost Release nothing.
func holdsSlots(d *tollgate.Decision) bool {
	policies := d.Policies()
	for i := range policies {
		if policies[i].InFlight > 0 {
			return true
		}
	}
	return false
}

// Denied reports whether a answers a denied request: 429 with a policy
// exhausted, or 503 with the store down under fail-closed. Adapters give
// these to the application's replacement for the denial answer.
func (a *Answer) Denied() bool {
	return a.Body.Error == CodeRateLimited || a.Body.Error == CodeUnavailable
}

// MissingTenant reports whether a answers a request without a tenant.
func (a *Answer) MissingTenant() bool {
	return a.Body.Error == CodeMissingTenant
}

// Decide decides on the request c, which call describes, puts the
// rate-limit headers of the decision in headers, and returns the answer,
// which the caller must Release; it returns nil, having decided nothing,
// when Skip exempts c. The answer is 401 with MissingTenantBody for a
// request without a tenant, 400 with InvalidTenantBody for a tenant ID the
// Limiter refuses (too long, or holding a control character), the denial
// status and body when the Limiter denies, and 500 with InternalErrorBody
// when it can not decide for a configuration error, which the Limiter
// logs. In the delay mode (Spec.MaxDelay), a request refused only for want
// of a slot of an in-flight policy first waits for one. An allowed request
// may hold such a slot until the answer is released (Answer.Release).
func (h *Handler[C]) Decide(c C, call *Call, headers Headers) *Answer {
	if h.skip != nil && h.skip(c) {
		return nil
	}
	a := answers.Get().(*Answer)
	a.Status, a.limiter, a.ctx = 0, h.limiter, call.Context
	a.Body = Body{} // on its own: in the assignment above, Go would zero a Body aside and copy it
	req := &a.req
	// Zeroed, then set field by field: a composite literal assigned
	// through a pointer is built on the stack and copied, a copy that
	// stalls the CPU on the words just written.
	*req = tollgate.Request{}
	req.Tenant, req.Cost, req.Budget, req.Method, req.Route = call.Tenant, h.cost, h.budget, call.Method, call.Route
	switch {
	case h.tenant != nil:
		req.Tenant = h.tenant(c)
	case call.Header != nil:
		req.Tenant = HeaderValue(call.Header, canonicalTenantHeader)
	}
	if h.costFunc != nil {
		req.Cost = max(h.costFunc(c), 1)
	}
	if h.route != nil && !h.routeLater {
		req.Route = h.route(c)
	}
	if req.Tenant == "" {
		a.Decision = tollgate.Decision{}
		a.Status, a.Body = http.StatusUnauthorized, MissingTenantBody
		return a
	}
	ctx := call.Context
	if h.held != nil && h.held.acquire(req.Tenant) {
		defer h.held.release(req.Tenant)
		req.MaxDelay = h.maxDelay
		if deadline, ok := ctx.Deadline(); ok {
			// A request whose context ends before its slot would be
			// held only to fail: it is decided as if it could not
			// wait that long.
			req.MaxDelay = min(req.MaxDelay, time.Until(deadline))
		}
	}
	err := hooks.TakeInto(ctx, h.limiter, req, &a.Decision, &a.op)
	if h.routeLater && !simplyAllowed(&a.Decision) {
		// The log, a deny handler or a wait for a slot will read it.
		req.Route = h.route(c)
		a.Decision.Route = req.Route
	}
	hooks.Observe(ctx, h.limiter, &a.Decision)
	waited := false
	if err == nil && !a.Decision.Allowed && req.MaxDelay > 0 && slotsOnly(&a.Decision) {
		// Every policy but the in-flight ones allows the request: it
		// waits for a slot, in line, within its delay.
		waited = true
		if !h.waitForSlot(ctx, req, &a.Decision) {
			a.Status, a.Body = http.StatusServiceUnavailable, CancelledBody
		}
	}
	switch {
	case a.Status != 0:
	case waited && a.Decision.Allowed:
		// Wait has held it for its tokens already.
	case errors.Is(err, tollgate.ErrInvalidTenant):
		a.Status, a.Body = http.StatusBadRequest, InvalidTenantBody
	case err != nil:
		a.Status, a.Body = http.StatusInternalServerError, InternalErrorBody
	case !a.Decision.Allowed:
		a.Status, a.Body = Denial(&a.Decision)
	case a.Decision.Delay > 0:
		if err := h.limiter.Hold(ctx, &a.Decision); err != nil {
			// The client went away while held: whatever is written
			// now reaches no one, and the tokens and the slot went
			// back.
			a.Status, a.Body = http.StatusServiceUnavailable, CancelledBody
		}
	}
	// The headers describe the state the request proceeds in: after its
	// wait, if it was held.
	if headers.Map != nil {
		writeHeaders(headers.Map, &a.Decision, h.partitionKey(req.Tenant))
	} else if headers.Set != nil {
		visitHeaders(&a.Decision, h.partitionKey(req.Tenant), headers.Set)
	}
	return a
}

// simplyAllowed reports whether d allowed its request at once, and not
// for shadow mode or the failure policy, as most decisions do: the
// Limiter's log has nothing to say of it.
func simplyAllowed(d *tollgate.Decision) bool {
	return d.Allowed && d.Delay == 0 && !d.Shadow && !d.Degraded
}

// slotsOnly reports whether d was denied by in-flight policies alone, so
// that a slot coming free would let it through.
func slotsOnly(d *tollgate.Decision) bool {
	policies, results := d.Policies(), d.Results()
	if !d.HasFigures() || len(policies) != len(results) {
		return false
	}
	denied := false
	for i := range results {
		if results[i].Allowed {
			continue
		}
		if policies[i].InFlight == 0 {
			return false
		}
		denied = true
	}
	return denied
}

// waitForSlot waits for a slot of req's tenant with Limiter.Wait, in
// order of arrival, for at most req.MaxDelay, and puts the decision it
// proceeds on in d. If none comes in time, d is the denial to answer with:
// Wait's last, or d as it was, and the request has spent nothing. It
// reports false if ctx ended first: the client went away.
func (h *Handler[C]) waitForSlot(ctx context.Context, req *tollgate.Request, d *tollgate.Decision) bool {
	wctx, cancel := context.WithTimeout(ctx, req.MaxDelay)
	defer cancel()
	got, err := h.limiter.Wait(wctx, *req)
	switch {
	case err == nil:
		*d = got
	case ctx.Err() != nil:
		return false
	case !got.Allowed && got.HasFigures():
		*d = got
	}
	return true
}

// HeaderValue returns the first value of the header key in h, or "". key
// must be in canonical form (http.CanonicalHeaderKey): HeaderValue is h.Get
// without the canonicalisation that Get repeats on every call.
func HeaderValue(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Response header names, in canonical form, so that they go straight into a
// header map.
const (
	HeaderLimit     = "X-Ratelimit-Limit"
	HeaderRemaining = "X-Ratelimit-Remaining"
	HeaderReset     = "X-Ratelimit-Reset"
	HeaderPolicy    = "Ratelimit-Policy"
	HeaderRateLimit = "Ratelimit"
	HeaderRetry     = "Retry-After"
)

// UnitConcurrentRequests is the quota unit (the draft's qu) of an in-flight
// policy: it counts the requests that run at once.
const UnitConcurrentRequests = "concurrent-requests"

// WriteHeaders sets d's rate-limit headers in h:
//
//   - X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset (Unix
//     seconds when it is full again) describe the policy closest to denying
//     (Decision.Policy);
//   - RateLimit-Policy lists every policy that applied as
//     "<name>";q=<burst or quota>;w=<seconds>, or for an in-flight policy
//     "<name>";q=<slots>;qu="concurrent-requests", and RateLimit reports
//     each as "<name>";r=<remaining>;t=<seconds until more quota is
//     available>, or "<name>";r=<free slots> (no one knows when a request
//     ends), as draft-ietf-httpapi-ratelimit-headers-10 defines them, in
//     RFC 9651 structured fields;
//   - on a denial, Retry-After says in whole seconds, rounded up and at
//     least 1, when every policy will allow the request, which is never
//     earlier than the t of a policy that denied it; for want of a slot,
//     it is an estimate (tollgate.Decision.RetryAfter).
//
// A decision without figures (fail-open, fail-closed, or shadow mode
// without its headers: see tollgate.Decision.HasFigures) has no headers.
// Handler.Decide writes them; WriteHeaders is for callers of the Limiter
// of their own.
func WriteHeaders(h http.Header, d *tollgate.Decision) { writeHeaders(h, d, nil) }

// writeHeaders is WriteHeaders with the partition key pk, an RFC 9651
// byte sequence's base64 to put in every RateLimit item, if not empty.
func writeHeaders(h http.Header, d *tollgate.Decision, pk []byte) {
	if !d.HasFigures() {
		return
	}
	ph := policyHeadersOf(d)
	// The policy values are shared, read-only slices; the request's values
	// and the slices that hold them share one allocation.
	blk := new(headerBlock)
	var ends valueEnds
	b := appendRequestValues(blk.buf[:0], &ends, d, ph, pk)
	var s string
	if len(b) <= len(blk.buf) {
		s = unsafe.String(&blk.buf[0], len(b)) // b was built in blk.buf, which nothing writes again
	} else {
		s = string(b)
	}
	n := blk.split(s, &ends, d.Allowed)
	h[HeaderLimit] = ph.limits[ph.index(d)]
	h[HeaderPolicy] = ph.policy
	h[HeaderRemaining] = blk.vals[0:1:1]
	h[HeaderReset] = blk.vals[1:2:2]
	h[HeaderRateLimit] = blk.vals[2:3:3]
	if n == 4 {
		h[HeaderRetry] = blk.vals[3:4:4]
	}
}

// VisitHeaders calls set with each rate-limit response header of d and its
// value, for frameworks that do not use http.Header; the headers and values
// are those of WriteHeaders. The values share one allocation; set may keep
// them.
func VisitHeaders(d *tollgate.Decision, set func(name, value string)) { visitHeaders(d, nil, set) }

func visitHeaders(d *tollgate.Decision, pk []byte, set func(name, value string)) {
	if !d.HasFigures() {
		return
	}
	ph := policyHeadersOf(d)
	var blk headerBlock
	var ends valueEnds
	s := string(appendRequestValues(blk.buf[:0], &ends, d, ph, pk))
	n := blk.split(s, &ends, d.Allowed)
	set(HeaderLimit, ph.limits[ph.index(d)][0])
	set(HeaderRemaining, blk.vals[0])
	set(HeaderReset, blk.vals[1])
	set(HeaderPolicy, ph.policy[0])
	set(HeaderRateLimit, blk.vals[2])
	if n == 4 {
		set(HeaderRetry, blk.vals[3])
	}
}

// A headerBlock holds the per-request header values: the bytes, and the
// one-element slices that a header map refers to.
type headerBlock struct {
	vals [4]string // Remaining, Reset, RateLimit, Retry-After
	buf  [96]byte
}

// valueEnds are where the values end in the bytes appendRequestValues
// makes. They stay out of the headerBlock, which is allocated per request:
// a smaller block is a smaller size class to allocate and to scan.
type valueEnds [4]int

// split cuts s, as appendRequestValues made it with ends, into blk.vals
// and returns how many values there are.
func (blk *headerBlock) split(s string, ends *valueEnds, allowed bool) int {
	n := 3
	if !allowed {
		n = 4
	}
	start := 0
	for i := range n {
		blk.vals[i] = s[start:ends[i]]
		start = ends[i]
	}
	return n
}

// appendRequestValues appends the values that change with each request to
// dst, recording where each ends in ends; pk, if not empty, is the
// partition key of every RateLimit item.
func appendRequestValues(dst []byte, ends *valueEnds, d *tollgate.Decision, ph *policyHeaders, pk []byte) []byte {
	b := strconv.AppendInt(dst, d.Remaining, 10)
	ends[0] = len(b)
	b = strconv.AppendInt(b, ceilUnix(d.Time, d.ResetAfter), 10)
	ends[1] = len(b)
	for i, r := range d.Results() {
		b = append(b, ph.rlPrefix[i]...)
		if r.Remaining == d.Remaining {
			// Usually the policy of X-RateLimit-Remaining: its digits
			// are there already, and formatting is most of this
			// function's time.
			b = append(b, b[:ends[0]]...)
		} else {
			b = strconv.AppendInt(b, r.Remaining, 10)
		}
		if !ph.slots[i] {
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, ph.untilMore(i, r), 10)
		}
		if len(pk) > 0 {
			b = append(b, ";pk=:"...)
			b = append(b, pk...)
			b = append(b, ':')
		}
	}
	ends[2] = len(b)
	if !d.Allowed {
		b = strconv.AppendInt(b, RetryAfterSeconds(d.RetryAfter), 10)
		ends[3] = len(b)
	}
	return b
}

// RetryAfterSeconds returns d in whole seconds, rounded up, and at least 1:
// the value of a Retry-After header. Rounding down would send clients back
// before a token is there.
func RetryAfterSeconds(d time.Duration) int64 {
	return max(ceilSeconds(d), 1)
}

func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}

// ceilUnix returns the Unix time of t plus d, in seconds rounded up: the
// sum in nanoseconds, where t.Add(d) would cost a request more.
func ceilUnix(t time.Time, d time.Duration) int64 {
	ns := int64(t.Nanosecond()) + int64(d)
	// Division truncates toward zero, which rounds a negative sum up.
	s := t.Unix() + ns/int64(time.Second)
	if ns%int64(time.Second) > 0 {
		s++
	}
	return s
}

// policyHeaders are the header values that depend on a plan's policies
// alone, and what untilMore needs of each policy. They are kept in the
// memo of the plan's policies (hooks.PolicyMemo), computed once per plan
// and budget.
type policyHeaders struct {
	names    []string   // of the policies, to find the one a Decision names
	policy   []string   // RateLimit-Policy, as a header map entry
	limits   [][]string // X-RateLimit-Limit of each policy, likewise
	rlPrefix []string   // RateLimit up to each policy's remaining count: `"<name>";r=`, after ", " but for the first
	interval []int64    // a bucket's µs per token; 0 for a quota or slots
	capacity []int64    // a bucket's burst, a quota's tokens, or slots
	slots    []bool     // an in-flight policy's: no time says when more is available

	// A quota's window is its current period, which moves: the values
	// hold from validFrom until validUntil.
	validFrom, validUntil time.Time
}

// policyHeadersOf returns the policy header values of d, which must have
// figures, from the memo of its plan's policies, computing them when the
// memo holds none or values of another quota period.
func policyHeadersOf(d *tollgate.Decision) *policyHeaders {
	memo := hooks.PolicyMemo(d)
	if ph, ok := memo.Load().(*policyHeaders); ok && !d.Time.Before(ph.validFrom) && d.Time.Before(ph.validUntil) {
		return ph
	}
	ph := newPolicyHeaders(d.Policies(), d.Time)
	memo.Store(ph)
	return ph
}

func newPolicyHeaders(policies []tollgate.Policy, now time.Time) *policyHeaders {
	ph := &policyHeaders{validUntil: forever}
	var policy []byte
	for i, p := range policies {
		var window, interval, capacity int64
		switch {
		case p.InFlight > 0:
			capacity = p.InFlight
		case p.Quota.IsZero():
			// The window of the bucket as written, not as rounded to
			// whole microseconds a token: 3 tokens at 3/s is 1 second.
			window = max(int64(math.Ceil(float64(p.Limit.Burst)/p.Limit.Rate-1e-9)), 1)
			interval, capacity = storekit.BucketRule(p.Limit.Rate, p.Limit.Burst).Interval, p.Limit.Burst
		default:
			start, end := p.Quota.Bounds(now)
			window, capacity = int64(end.Sub(start)/time.Second), p.Quota.Tokens
			ph.validFrom = later(ph.validFrom, start)
			ph.validUntil = earlier(ph.validUntil, end)
		}
		var sep string
		if i > 0 {
			sep = ", "
		}
		policy = append(policy, sep...)
		policy = appendSFString(policy, p.Name)
		policy = append(policy, ";q="...)
		policy = strconv.AppendInt(policy, capacity, 10)
		if p.InFlight > 0 {
			// A count of requests at once has no window.
			policy = append(policy, ";qu="...)
			policy = appendSFString(policy, UnitConcurrentRequests)
		} else {
			policy = append(policy, ";w="...)
			policy = strconv.AppendInt(policy, window, 10)
		}
		ph.names = append(ph.names, p.Name)
		ph.limits = append(ph.limits, []string{strconv.FormatInt(capacity, 10)})
		ph.rlPrefix = append(ph.rlPrefix, sep+string(appendSFString(nil, p.Name))+";r=")
		ph.interval = append(ph.interval, interval)
		ph.capacity = append(ph.capacity, capacity)
		ph.slots = append(ph.slots, p.InFlight > 0)
	}
	// Capacity 1, so that Header.Add copies rather than writes into the
	// shared array.
	ph.policy = []string{string(policy)}
	return ph
}

// forever is when the values of a plan without quotas stop holding.
var forever = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// index returns the position of the policy d's figures describe.
func (ph *policyHeaders) index(d *tollgate.Decision) int {
	for i, name := range ph.names {
		if name == d.Policy {
			return i
		}
	}
	return 0
}

// untilMore returns the RateLimit field's t of policy i with result r: the
// seconds until more quota is available, rounded up. A bucket gets its next
// token back then; a used quota, when its period ends.
func (ph *policyHeaders) untilMore(i int, r tollgate.Result) int64 {
	if r.ResetAfter <= 0 {
		return 0
	}
	interval := ph.interval[i]
	if interval == 0 {
		return ceilSeconds(r.ResetAfter)
	}
	// The bucket holds Remaining tokens while its theoretical arrival
	// time is more than (Remaining+1) intervals short of the tolerance;
	// the next token arrives when it gets there.
	ahead := r.ResetAfter.Microseconds()
	wait := ahead - ph.capacity[i]*interval + (r.Remaining+1)*interval
	return ceilSeconds(time.Duration(max(wait, 0)) * time.Microsecond)
}

// appendSFString appends s as a Structured Field string (RFC 9651): quoted,
// with backslash and quote escaped, and any byte outside printable ASCII
// replaced, which the engine's rule for names keeps from happening.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '"' || c == '\\' {
			b = append(b, '\\')
		} else if c < 0x20 || c > 0x7e {
			c = '?'
		}
		b = append(b, c)
	}
	return append(b, '"')
}
