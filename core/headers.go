package tollgate

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
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
	ph := d.planHeaders
	if ph == nil {
		ph = newPlanHeaders(d.Plan)
	}
	// The plan's values are shared, read-only slices. The request's
	// values and the slices that hold them share one allocation.
	blk := new(headerBlock)
	b := d.appendRequestValuesTo(blk, ph)
	var s string
	if len(b) <= len(blk.buf) {
		s = unsafe.String(&blk.buf[0], len(b)) // b was built in blk.buf
	} else {
		s = string(b)
	}
	n := blk.split(s, d.Allowed)
	h[HeaderLimit] = ph.limitValue
	h[HeaderPolicy] = ph.policyValue
	h[HeaderRemaining] = blk.vals[0:1:1]
	h[HeaderReset] = blk.vals[1:2:2]
	h[HeaderRateLimit] = blk.vals[2:3:3]
	if n == 4 {
		h[HeaderRetry] = blk.vals[3:4:4]
	}
}

// A headerBlock holds the per-request header values of WriteHeaders: the
// bytes, and the one-element slices that the header map refers to.
type headerBlock struct {
	vals [4]string // Remaining, Reset, RateLimit, Retry-After
	ends [4]uint8  // at most about 220 bytes in all, with a 64-character plan name
	buf  [64]byte
}

// split cuts s, as appendRequestValues made it, into blk.vals and returns
// how many values there are.
func (blk *headerBlock) split(s string, allowed bool) int {
	n := 3
	if !allowed {
		n = 4
	}
	start := 0
	for i := 0; i < n; i++ {
		end := int(blk.ends[i])
		blk.vals[i] = s[start:end]
		start = end
	}
	return n
}

// planHeaders are the header values that depend on the plan alone.
type planHeaders struct {
	plan     Plan
	limit    string // X-RateLimit-Limit: the burst
	policy   string // RateLimit-Policy
	rlPrefix string // RateLimit up to the remaining count: "<plan>";r=

	// The values as header map entries, shared by every response. Their
	// capacity is 1, so Header.Add copies rather than writes into them.
	limitValue, policyValue []string
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
	ph := &planHeaders{
		plan:     p,
		limit:    strconv.FormatInt(p.Limit.Burst, 10),
		policy:   string(policy),
		rlPrefix: string(appendSFString(nil, p.Name)) + ";r=",
	}
	ph.limitValue = []string{ph.limit}
	ph.policyValue = []string{ph.policy}
	return ph
}

// headerValues formats the header values into vals and returns how many
// there are. The per-request values share one string.
func (d *Decision) headerValues(vals *[len(headerNames)]string) int {
	ph := d.planHeaders
	if ph == nil {
		ph = newPlanHeaders(d.Plan)
	}
	var blk headerBlock
	n := blk.split(string(d.appendRequestValuesTo(&blk, ph)), d.Allowed)
	vals[0] = ph.limit
	vals[1] = blk.vals[0]
	vals[2] = blk.vals[1]
	vals[3] = ph.policy
	vals[4] = blk.vals[2]
	if n == 3 {
		return 5
	}
	vals[5] = blk.vals[3]
	return 6
}

// appendRequestValuesTo formats the values that change with each request
// into blk.buf (or, if they do not fit, a larger buffer), recording where
// each ends in blk.ends.
func (d *Decision) appendRequestValuesTo(blk *headerBlock, ph *planHeaders) []byte {
	b := strconv.AppendInt(blk.buf[:0], d.Remaining, 10)
	remaining := len(b)
	blk.ends[0] = uint8(remaining)
	b = strconv.AppendInt(b, ceilUnix(d.Time.Add(d.ResetAfter)), 10)
	blk.ends[1] = uint8(len(b))
	b = append(b, ph.rlPrefix...)
	b = append(b, b[:remaining]...)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, ceilSeconds(d.ResetAfter), 10)
	blk.ends[2] = uint8(len(b))
	if !d.Allowed {
		b = strconv.AppendInt(b, RetryAfterSeconds(d.RetryAfter), 10)
		blk.ends[3] = uint8(len(b))
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
