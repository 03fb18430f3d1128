// Package pacer makes an HTTP client well behaved towards a rate-limited
// API: its Transport reads the rate-limit headers of every answer, holds
// requests back while the budget is spent instead of sending requests that
// would be refused, and retries a 429 Too Many Requests once the Retry-After
// the server named has passed.
//
// It understands the headers tollgate sends: RateLimit and RateLimit-Policy
// (draft-ietf-httpapi-ratelimit-headers), X-RateLimit-Remaining and
// X-RateLimit-Reset, and Retry-After in seconds or as an HTTP date.
//
//	client := &http.Client{Transport: &pacer.Transport{}}
package pacer

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultMaxRetries is how many times a Transport sends a request again
// after a 429 unless MaxRetries says otherwise.
const DefaultMaxRetries = 3

// DefaultMaxWait is the longest a Transport waits before a request unless
// MaxWait says otherwise.
const DefaultMaxWait = 30 * time.Second

// A Transport is an http.RoundTripper that paces requests by the rate-limit
// headers of the answers. Requests with the same key (by default, the same
// host) share one budget:
//
//   - When an answer says no tokens are left (RateLimit r=0 or
//     X-RateLimit-Remaining: 0), the next request waits until one token is
//     back, by the refill rate of RateLimit-Policy (q tokens in w seconds),
//     at most until the server says more quota is available (RateLimit t),
//     else until the bucket is full again (X-RateLimit-Reset). When the
//     headers list several policies, the one with the fewest tokens left
//     paces.
//     Concurrent requests waiting on an empty budget are released one token
//     apart, not all at once.
//   - A 429 holds every request of its key until its Retry-After has passed
//     and is then retried, up to MaxRetries times, if its body can be sent
//     again (no body, or Request.GetBody set, as http.NewRequest does for
//     in-memory bodies). Otherwise the 429 goes back to the caller.
//   - No wait is longer than MaxWait: a request that would wait longer is
//     sent at once, and a 429 that asks for longer goes back to the caller.
//     Every wait ends early, with the context's error, when the request's
//     context is done.
//
// The zero Transport is ready to use. A Transport is safe for concurrent use
// and must not be copied after first use.
type Transport struct {
	// Base sends the requests (default http.DefaultTransport).
	Base http.RoundTripper

	// MaxRetries bounds how many times one request is sent again after a
	// 429 (0 means DefaultMaxRetries; negative, never).
	MaxRetries int

	// MaxWait bounds a single wait (0 means DefaultMaxWait).
	MaxWait time.Duration

	// Key returns the budget that a request draws from (default its URL's
	// host). A client that calls one API as several tenants should key by
	// tenant too, as each tenant has a budget of its own.
	Key func(*http.Request) string

	// now and sleep are the Transport's clock; tests replace them so that
	// they never wait for real.
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error

	mu      sync.Mutex
	budgets map[string]*budget
}

// budget is what a Transport knows of one key's bucket on the server.
type budget struct {
	retryAt  time.Time     // a 429's Retry-After: nothing goes out before
	refillAt time.Time     // an empty bucket's next token
	reserved time.Time     // tokens promised to requests already waiting end here
	empty    bool          // the last answer said no whole token is left
	perToken time.Duration // refill time of one token; 0 if unknown
}

// RoundTrip sends req, after waiting if its budget is spent, and sends it
// again after a 429 as the Transport's doc says. It implements
// http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	key := t.key(req)
	for attempt := 0; ; attempt++ {
		if err := t.waitTurn(req.Context(), key); err != nil {
			if attempt == 0 && req.Body != nil {
				req.Body.Close() // a RoundTripper closes the body, even on errors
			}
			return nil, err
		}
		send := req
		if attempt > 0 {
			var err error
			if send, err = rewind(req); err != nil {
				return nil, err
			}
		}
		resp, err := t.base().RoundTrip(send)
		if err != nil {
			return nil, err
		}
		retryAfter := t.observe(key, resp)
		if resp.StatusCode != http.StatusTooManyRequests || attempt >= t.maxRetries() ||
			!replayable(req) || retryAfter > t.maxWait() {
			return resp, nil
		}
		// Read what is left so that the connection can be reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
	}
}

// waitTurn waits until a request of key may go out.
func (t *Transport) waitTurn(ctx context.Context, key string) error {
	for {
		wait := t.reserve(key)
		if wait <= 0 {
			return ctx.Err()
		}
		if err := t.pause(ctx, wait); err != nil {
			return err
		}
		// A 429 that came in meanwhile holds this request too, behind
		// the one it answered, which reserved its turn first.
		if !t.held(key) {
			return nil
		}
	}
}

// reserve returns how long a request of key must wait, and reserves its
// token if the budget is empty.
func (t *Transport) reserve(key string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.budget(key)
	now := t.clock()
	at := now
	for _, u := range [...]time.Time{b.retryAt, b.refillAt, b.reserved} {
		if u.After(at) {
			at = u
		}
	}
	wait := at.Sub(now)
	if wait > t.maxWait() {
		return 0 // not worth holding the caller: let the server answer
	}
	if b.empty && b.perToken > 0 {
		// Reserve the token this request waits for: the next request
		// waits for the one after, so waiters go out at the refill
		// rate instead of together.
		b.reserved = at.Add(b.perToken)
	}
	return wait
}

// held reports whether a 429's Retry-After still holds key.
func (t *Transport) held(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.budget(key).retryAt.After(t.clock())
}

// observe records what resp says of key's budget and returns how long a
// 429 asks the client to wait (0 for other answers).
func (t *Transport) observe(key string, resp *http.Response) time.Duration {
	now := t.clock()
	h := parseHeaders(resp.Header, now)
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.budget(key)
	if h.perToken > 0 {
		b.perToken = h.perToken
	}
	if h.hasRemaining {
		b.empty = h.remaining < 1
		if b.empty {
			if wait := h.untilToken(b.perToken); wait > 0 {
				b.refillAt = later(b.refillAt, now.Add(wait))
			}
		} else {
			// Tokens are there: whatever was promised or expected
			// is settled.
			b.refillAt, b.reserved = time.Time{}, time.Time{}
		}
	}
	if resp.StatusCode != http.StatusTooManyRequests {
		return 0
	}
	b.empty = true
	wait := h.retryAfter
	if wait <= 0 {
		// A 429 without Retry-After: wait for a token if the rate is
		// known, else a second, rather than retry at once.
		wait = h.untilToken(b.perToken)
		if wait <= 0 {
			wait = time.Second
		}
	}
	b.retryAt = later(b.retryAt, now.Add(wait))
	return wait
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (t *Transport) budget(key string) *budget {
	if t.budgets == nil {
		t.budgets = make(map[string]*budget)
	}
	b, ok := t.budgets[key]
	if !ok {
		b = &budget{}
		t.budgets[key] = b
	}
	return b
}

func (t *Transport) key(req *http.Request) string {
	if t.Key != nil {
		return t.Key(req)
	}
	return req.URL.Host
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

func (t *Transport) maxRetries() int {
	switch {
	case t.MaxRetries < 0:
		return 0
	case t.MaxRetries == 0:
		return DefaultMaxRetries
	}
	return t.MaxRetries
}

func (t *Transport) maxWait() time.Duration {
	if t.MaxWait > 0 {
		return t.MaxWait
	}
	return DefaultMaxWait
}

func (t *Transport) clock() time.Time {
	if t.now != nil {
		return t.now()
	}
	return time.Now()
}

func (t *Transport) pause(ctx context.Context, d time.Duration) error {
	if t.sleep != nil {
		return t.sleep(ctx, d)
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// replayable reports whether req can be sent again.
func replayable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// rewind returns a copy of req with a fresh body, to send it again.
func rewind(req *http.Request) (*http.Request, error) {
	r := req.Clone(req.Context())
	if req.Body != nil && req.Body != http.NoBody {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		r.Body = body
	}
	return r, nil
}

// headers are the rate-limit figures of one answer, for the policy closest
// to denying when the answer lists several.
type headers struct {
	hasRemaining bool
	remaining    int64
	untilMore    time.Duration // until more quota is available (RateLimit's t); 0 if unknown
	perToken     time.Duration // from the policy; 0 if unknown
	retryAfter   time.Duration // 0 if none
}

// untilToken returns how long an empty bucket takes to hold one token: one
// token's refill time when the rate is known, capped by the time the server
// says more quota takes (whole seconds, rounded up; for a calendar quota,
// the rest of its period, which is past any MaxWait).
func (h headers) untilToken(perToken time.Duration) time.Duration {
	switch {
	case perToken > 0 && h.untilMore > 0:
		return min(perToken, h.untilMore)
	case perToken > 0:
		return perToken
	}
	return h.untilMore
}

func parseHeaders(hdr http.Header, now time.Time) headers {
	var h headers
	// RateLimit lists one member per policy: the one with the fewest
	// tokens left binds, and of those the one that takes longest to give
	// more.
	binding := ""
	for _, m := range sfList(hdr.Get("RateLimit")) {
		r, err := strconv.ParseInt(m.params["r"], 10, 64)
		if err != nil {
			continue
		}
		var more time.Duration
		if s, err := strconv.ParseInt(m.params["t"], 10, 64); err == nil && s >= 0 {
			more = seconds(s)
		}
		if !h.hasRemaining || r < h.remaining || r == h.remaining && more > h.untilMore {
			h.hasRemaining, h.remaining, h.untilMore, binding = true, r, more, m.name
		}
	}
	if !h.hasRemaining {
		if r, err := strconv.ParseInt(strings.TrimSpace(hdr.Get("X-RateLimit-Remaining")), 10, 64); err == nil {
			h.hasRemaining, h.remaining = true, r
		}
	}
	if h.untilMore == 0 {
		// The time until the bucket is full: longer than until a token,
		// but all that the older headers tell.
		if reset, err := strconv.ParseInt(strings.TrimSpace(hdr.Get("X-RateLimit-Reset")), 10, 64); err == nil {
			h.untilMore = max(time.Unix(reset, 0).Sub(now), 0)
		}
	}
	for i, m := range sfList(hdr.Get("RateLimit-Policy")) {
		if m.name != binding && (i > 0 || binding != "") {
			continue
		}
		q, errQ := strconv.ParseInt(m.params["q"], 10, 64)
		w, errW := strconv.ParseInt(m.params["w"], 10, 64)
		if errQ == nil && errW == nil && q > 0 && w > 0 {
			h.perToken = time.Duration(w) * time.Second / time.Duration(q)
		}
		break
	}
	h.retryAfter = parseRetryAfter(hdr.Get("Retry-After"), now)
	return h
}

// A member is one item of a Structured Field list such as
// `"free";r=0;t=10`: its name ("free") and parameters ({"r": "0", "t": "10"}).
type member struct {
	name   string
	params map[string]string
}

// sfList returns the members of a Structured Field list of named items with
// integer parameters. It is just enough of RFC 9651 for the rate-limit
// headers: commas and semicolons inside quoted names are kept.
func sfList(v string) []member {
	var out []member
	for _, item := range splitOutsideQuotes(v, ',') {
		parts := splitOutsideQuotes(item, ';')
		name := strings.TrimSpace(parts[0])
		if unq, err := strconv.Unquote(name); err == nil {
			name = unq
		}
		m := member{name: name, params: make(map[string]string, len(parts)-1)}
		for _, p := range parts[1:] {
			k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
			m.params[strings.TrimSpace(k)] = strings.TrimSpace(val)
		}
		out = append(out, m)
	}
	return out
}

// splitOutsideQuotes splits s at each sep that is not inside a quoted
// string; "" gives no parts.
func splitOutsideQuotes(s string, sep byte) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	var parts []string
	quoted, escaped, start := false, false, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case escaped:
			escaped = false
		case quoted && c == '\\':
			escaped = true
		case c == '"':
			quoted = !quoted
		case !quoted && c == sep:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// parseRetryAfter reads Retry-After as delay-seconds or an HTTP date; it
// returns 0 for a missing or malformed value.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		return seconds(s)
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(at.Sub(now), 0)
	}
	return 0
}

// seconds converts s to a Duration, with negative values as 0 and values
// that would overflow as a century, which no MaxWait reaches.
func seconds(s int64) time.Duration {
	const century = 100 * 365 * 24 * 3600
	return time.Duration(min(max(s, 0), century)) * time.Second
}
