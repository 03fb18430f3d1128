package tollgate

import (
	"net/http"
	"strconv"
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

// headerValues formats the header values into vals, all in one string, and
// returns how many there are.
func (d *Decision) headerValues(vals *[len(headerNames)]string) int {
	var buf [160]byte
	b := buf[:0]
	var ends [len(headerNames)]int
	n := 0
	mark := func() { ends[n] = len(b); n++ }

	limit := d.Plan.Limit
	reset := ceilSeconds(d.ResetAfter)
	window := max(ceilSeconds(limit.Window()), 1)

	b = strconv.AppendInt(b, limit.Burst, 10)
	mark()
	b = strconv.AppendInt(b, d.Remaining, 10)
	mark()
	b = strconv.AppendInt(b, ceilUnix(d.Time.Add(d.ResetAfter)), 10)
	mark()
	b = appendSFString(b, d.Plan.Name)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, limit.Burst, 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, window, 10)
	mark()
	b = appendSFString(b, d.Plan.Name)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, d.Remaining, 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, reset, 10)
	mark()
	if !d.Allowed {
		b = strconv.AppendInt(b, RetryAfterSeconds(d.RetryAfter), 10)
		mark()
	}
	s := string(b)
	start := 0
	for i := 0; i < n; i++ {
		vals[i] = s[start:ends[i]]
		start = ends[i]
	}
	return n
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
