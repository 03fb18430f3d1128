package tollgatehttp

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	tollgate "github.com/tollgate-go/tollgate/core"
)

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

// VisitHeaders calls set with each rate-limit response header of d and its
// value, for frameworks that do not use http.Header (see WriteHeaders for
// the fields). A decision without figures (fail-open or fail-closed) has no
// headers, as any figure would be made up.
//
// The values share one allocation; set may keep them.
func VisitHeaders(d *tollgate.Decision, set func(name, value string)) {
	if !d.HasFigures() {
		return
	}
	ph := policyHeadersOf(d)
	var blk headerBlock
	var ends valueEnds
	s := string(appendRequestValues(blk.buf[:0], &ends, d, ph))
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

// WriteHeaders sets d's rate-limit headers in h:
//
//   - X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset (Unix
//     seconds when it is full again) describe the policy closest to denying
//     (Decision.Policy);
//   - RateLimit-Policy lists every policy that applied as
//     "<name>";q=<burst or quota>;w=<seconds>, and RateLimit reports each as
//     "<name>";r=<remaining>;t=<seconds until more quota is available>, as
//     draft-ietf-httpapi-ratelimit-headers-10 defines them, in RFC 9651
//     structured fields;
//   - on a denial, Retry-After says in whole seconds, rounded up and at
//     least 1, when every policy will allow the request, which is never
//     earlier than the t of a policy that denied it.
//
// A decision without figures (fail-open or fail-closed) has no headers, as
// any figure would be made up.
func WriteHeaders(h http.Header, d *tollgate.Decision) {
	if !d.HasFigures() {
		return
	}
	ph := policyHeadersOf(d)
	// The policy values are shared, read-only slices; the request's values
	// and the slices that hold them share one allocation.
	blk := new(headerBlock)
	var ends valueEnds
	b := appendRequestValues(blk.buf[:0], &ends, d, ph)
	var s string
	if len(b) <= len(blk.buf) {
		s = unsafe.String(&blk.buf[0], len(b)) // b was built in blk.buf
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
	for i := 0; i < n; i++ {
		end := ends[i]
		blk.vals[i] = s[start:end]
		start = end
	}
	return n
}

// appendRequestValues appends the values that change with each request to
// dst, recording where each ends in ends.
func appendRequestValues(dst []byte, ends *valueEnds, d *tollgate.Decision, ph *policyHeaders) []byte {
	b := strconv.AppendInt(dst, d.Remaining, 10)
	ends[0] = len(b)
	b = strconv.AppendInt(b, ceilUnix(d.Time.Add(d.ResetAfter)), 10)
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
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, ph.untilMore(i, r), 10)
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

func ceilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

// policyHeaders are the header values that depend on a plan's policies
// alone, and what untilMore needs of each policy.
type policyHeaders struct {
	policies []tollgate.Policy // the Decision's, by identity
	policy   []string          // RateLimit-Policy, as a header map entry
	limits   [][]string        // X-RateLimit-Limit of each policy, likewise
	rlPrefix []string          // RateLimit up to each policy's remaining count: `"<name>";r=`, after ", " but for the first
	interval []int64           // a bucket's µs per token; 0 for a quota
	capacity []int64           // a bucket's burst or a quota's tokens

	// A quota's window is its current period, which moves: the values
	// hold from validFrom until validUntil.
	validFrom, validUntil time.Time
}

func newPolicyHeaders(policies []tollgate.Policy, now time.Time) *policyHeaders {
	ph := &policyHeaders{policies: policies, validUntil: time.Unix(math.MaxInt32, 0)}
	var policy []byte
	for i, p := range policies {
		var window, interval, capacity int64
		if p.Quota.IsZero() {
			// The window of the bucket as written, not as rounded to
			// whole microseconds a token: 3 tokens at 3/s is 1 second.
			window = max(int64(math.Ceil(float64(p.Limit.Burst)/p.Limit.Rate-1e-9)), 1)
			interval, capacity = p.Limit.TokenInterval(), p.Limit.Burst
		} else {
			start, end := p.Quota.Bounds(now)
			window, capacity = int64(end.Sub(start)/time.Second), p.Quota.Tokens
			if start.After(ph.validFrom) {
				ph.validFrom = start
			}
			if end.Before(ph.validUntil) {
				ph.validUntil = end
			}
		}
		var sep string
		if i > 0 {
			sep = ", "
		}
		policy = append(policy, sep...)
		policy = appendSFString(policy, p.Name)
		policy = append(policy, ";q="...)
		policy = strconv.AppendInt(policy, capacity, 10)
		policy = append(policy, ";w="...)
		policy = strconv.AppendInt(policy, window, 10)
		ph.limits = append(ph.limits, []string{strconv.FormatInt(capacity, 10)})
		ph.rlPrefix = append(ph.rlPrefix, sep+string(appendSFString(nil, p.Name))+";r=")
		ph.interval = append(ph.interval, interval)
		ph.capacity = append(ph.capacity, capacity)
	}
	// Capacity 1, so that Header.Add copies rather than writes into the
	// shared array.
	ph.policy = []string{string(policy)}
	return ph
}

// index returns the position of the policy d's figures describe.
func (ph *policyHeaders) index(d *tollgate.Decision) int {
	for i := range ph.policies {
		if ph.policies[i].Name == d.Policy {
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
// replaced, which tollgate.ValidName keeps from happening.
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

// policyHeaderCache keeps the policyHeaders of the rule sets seen, by the
// identity of their policy slice, which a Limiter compiles once per plan.
// Reads take no lock; the few writes copy the map.
var policyHeaderCache struct {
	mu      sync.Mutex
	entries atomic.Pointer[map[*tollgate.Policy]*policyHeaders]
}

// maxCachedPolicySets bounds the cache against resolvers that make up a
// plan per tenant; past it, the cache starts again.
const maxCachedPolicySets = 1024

func policyHeadersOf(d *tollgate.Decision) *policyHeaders {
	policies := d.Policies()
	key := unsafe.SliceData(policies)
	if m := policyHeaderCache.entries.Load(); m != nil {
		if ph, ok := (*m)[key]; ok && len(ph.policies) == len(policies) &&
			!d.Time.Before(ph.validFrom) && d.Time.Before(ph.validUntil) {
			return ph
		}
	}
	ph := newPolicyHeaders(policies, d.Time)
	c := &policyHeaderCache
	c.mu.Lock()
	defer c.mu.Unlock()
	var old map[*tollgate.Policy]*policyHeaders
	if m := c.entries.Load(); m != nil && len(*m) < maxCachedPolicySets {
		old = *m
	}
	next := make(map[*tollgate.Policy]*policyHeaders, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[key] = ph
	c.entries.Store(&next)
	return ph
}
