package tollgate

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Response header names, in canonical form.
const (
	HeaderLimit     = "X-Ratelimit-Limit"
	HeaderRemaining = "X-Ratelimit-Remaining"
	HeaderReset     = "X-Ratelimit-Reset"
	HeaderPolicy    = "Ratelimit-Policy"
	HeaderRateLimit = "Ratelimit"
	HeaderRetry     = "Retry-After"
)

// headerNames lists the headers in the order VisitHeaders reports them.
var headerNames = [...]string{HeaderLimit, HeaderRemaining, HeaderReset, HeaderPolicy, HeaderRateLimit, HeaderRetry}

// VisitHeaders calls set with each rate-limit response header of d and its
// value: X-RateLimit-Limit (the plan's burst), X-RateLimit-Remaining,
// X-RateLimit-Reset (Unix seconds when the bucket is full again), the
// RateLimit-Policy and RateLimit fields of the IETF draft
// draft-ietf-httpapi-ratelimit-headers-10, and, on a denial, Retry-After in
// whole seconds, rounded up, at least 1. A decision without figures (fail-open
// or fail-closed) has no headers, as any figure would be made up.
//
// The values share one allocation; set may keep them.
func (d *Decision) VisitHeaders(set func(name, value string)) {
	if !d.figures {
		return
	}
	var vals [len(headerNames)]string
	n := d.headerValues(&vals)
	for i := 0; i < n; i++ {
		set(headerNames[i], vals[i])
	}
}

// WriteHeaders sets d's rate-limit headers in h; see VisitHeaders.
func (d *Decision) WriteHeaders(h http.Header) {
	if !d.figures {
		return
	}
	var vals [len(headerNames)]string
	n := d.headerValues(&vals)
	// One backing array for all the values, instead of one slice each.
	backing := make([]string, n)
	for i := 0; i < n; i++ {
		backing[i] = vals[i]
		h[headerNames[i]] = backing[i : i+1 : i+1]
	}
}

// planHeaders are the header values that depend on the plan alone.
type planHeaders struct {
	plan     Plan
	limit    string // X-RateLimit-Limit: the burst
	policy   string // RateLimit-Policy
	rlPrefix string // RateLimit up to the remaining count: "<plan>";r=
}

func newPlanHeaders(p Plan) *planHeaders {
	// The window of the plan as written, not as rounded to whole
	// microseconds a token: 3 tokens at 3/s is a 1-second window.
	window := max(int64(math.Ceil(float64(p.Limit.Burst)/p.Limit.Rate-1e-9)), 1)
	policy := appendSFString(nil, p.Name)
	policy = append(policy, ";q="...)
	policy = strconv.AppendInt(policy, p.Limit.Burst, 10)
	policy = append(policy, ";w="...)
	policy = strconv.AppendInt(policy, window, 10)
	return &planHeaders{
		plan:     p,
		limit:    strconv.FormatInt(p.Limit.Burst, 10),
		policy:   string(policy),
		rlPrefix: string(appendSFString(nil, p.Name)) + ";r=",
	}
}

// headerValues formats the header values into vals and returns how many
// there are. The per-request values share one string.
func (d *Decision) headerValues(vals *[len(headerNames)]string) int {
	ph := d.planHeaders
	if ph == nil {
		ph = newPlanHeaders(d.Plan)
	}
	var buf [128]byte
	b := strconv.AppendInt(buf[:0], d.Remaining, 10)
	endRemaining := len(b)
	b = strconv.AppendInt(b, ceilUnix(d.Time.Add(d.ResetAfter)), 10)
	endReset := len(b)
	b = append(b, ph.rlPrefix...)
	b = append(b, b[:endRemaining]...)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, ceilSeconds(d.ResetAfter), 10)
	endRateLimit := len(b)
	if !d.Allowed {
		b = strconv.AppendInt(b, RetryAfterSeconds(d.RetryAfter), 10)
	}
	s := string(b)
	vals[0] = ph.limit
	vals[1] = s[:endRemaining]
	vals[2] = s[endRemaining:endReset]
	vals[3] = ph.policy
	vals[4] = s[endReset:endRateLimit]
	if d.Allowed {
		return 5
	}
	vals[5] = s[endRateLimit:]
	return 6
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

func ceilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

// appendSFString appends s as a Structured Field string (RFC 8941): quoted,
// with backslash and quote escaped. Plan.Validate keeps names printable ASCII.
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

// A planHeaderCache keeps the planHeaders of the plans a Limiter has seen,
// by name: hashing a name is cheaper than hashing a whole Plan, and an entry
// whose limit no longer matches is replaced. Reads take no lock; the few
// writes copy the map.
type planHeaderCache struct {
	mu    sync.Mutex
	plans atomic.Pointer[map[string]*planHeaders]
}

// maxCachedPlans bounds the cache against resolvers that make up a plan per
// tenant; past it, header values are formatted on each request.
const maxCachedPlans = 256

func (c *planHeaderCache) get(p Plan) *planHeaders {
	if m := c.plans.Load(); m != nil {
		if ph, ok := (*m)[p.Name]; ok && ph.plan == p {
			return ph
		}
	}
	ph := newPlanHeaders(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	var old map[string]*planHeaders
	if m := c.plans.Load(); m != nil {
		old = *m
	}
	if _, replacing := old[p.Name]; replacing || len(old) < maxCachedPlans {
		next := make(map[string]*planHeaders, len(old)+1)
		for k, v := range old {
			next[k] = v
		}
		next[p.Name] = ph
		c.plans.Store(&next)
	}
	return ph
}
