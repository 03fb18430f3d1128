package pacer

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a Transport's clock that moves only when the Transport
// sleeps, and records the sleeps; no test waits for real.
type fakeClock struct {
	mu     sync.Mutex
	t      time.Time
	slept  []time.Duration
	frozen bool // sleeps do not move the clock
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slept = append(c.slept, d)
	if !c.frozen {
		c.t = c.t.Add(d)
	}
	return nil
}

func (c *fakeClock) sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.slept...)
}

// server answers each request with the next of answers (the last one
// repeats) and records what it received.
type server struct {
	*httptest.Server
	mu      sync.Mutex
	answers []func(w http.ResponseWriter)
	bodies  []string
}

func newServer(t *testing.T, answers ...func(w http.ResponseWriter)) *server {
	s := &server{answers: answers}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		n := len(s.bodies)
		s.bodies = append(s.bodies, string(body))
		s.mu.Unlock()
		s.answers[min(n, len(s.answers)-1)](w)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bodies...)
}

// answer returns a response writer of status with the header pairs given.
func answer(status int, kv ...string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(kv); i += 2 {
			w.Header().Set(kv[i], kv[i+1])
		}
		w.WriteHeader(status)
		io.WriteString(w, `{}`)
	}
}

var ok = answer(http.StatusOK)

func tooMany(retryAfter string) func(w http.ResponseWriter) {
	return answer(http.StatusTooManyRequests, "Retry-After", retryAfter)
}

func newTransport(c *fakeClock) *Transport {
	return &Transport{now: c.now, sleep: c.sleep}
}

func get(t *testing.T, tr *Transport, url string) *http.Response {
	t.Helper()
	resp, err := (&http.Client{Transport: tr}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestWaitsRetryAfterAndRetries(t *testing.T) {
	srv := newServer(t, tooMany("2"), ok)
	clock := newFakeClock()
	resp := get(t, newTransport(clock), srv.URL)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200 after the retry", resp.StatusCode)
	}
	if n := len(srv.requests()); n != 2 {
		t.Errorf("server saw %d requests, want 2", n)
	}
	if got := clock.sleeps(); !equalDurations(got, []time.Duration{2 * time.Second}) {
		t.Errorf("slept %v, want [2s]", got)
	}
}

func TestRetryAfterAsHTTPDate(t *testing.T) {
	clock := newFakeClock()
	date := clock.now().Add(4 * time.Second).Format(http.TimeFormat)
	srv := newServer(t, tooMany(date), ok)
	if resp := get(t, newTransport(clock), srv.URL); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
	if got := clock.sleeps(); !equalDurations(got, []time.Duration{4 * time.Second}) {
		t.Errorf("slept %v, want [4s]", got)
	}
}

func TestRetriesAreBounded(t *testing.T) {
	srv := newServer(t, tooMany("1"))
	clock := newFakeClock()
	tr := newTransport(clock)
	tr.MaxRetries = 2
	if resp := get(t, tr, srv.URL); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d, want the last 429", resp.StatusCode)
	}
	if n := len(srv.requests()); n != 3 {
		t.Errorf("server saw %d requests, want 1 + 2 retries", n)
	}
	if got := clock.sleeps(); !equalDurations(got, []time.Duration{time.Second, time.Second}) {
		t.Errorf("slept %v, want [1s 1s]", got)
	}
}

func TestA429HoldsTheNextRequest(t *testing.T) {
	srv := newServer(t, tooMany("3"), ok)
	clock := newFakeClock()
	tr := newTransport(clock)
	tr.MaxRetries = -1
	if resp := get(t, tr, srv.URL); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d, want the 429 back: retries are off", resp.StatusCode)
	}
	if got := clock.sleeps(); len(got) != 0 {
		t.Fatalf("slept %v before handing back the 429", got)
	}
	if resp := get(t, tr, srv.URL); resp.StatusCode != http.StatusOK {
		t.Fatalf("second request: status %d", resp.StatusCode)
	}
	if got := clock.sleeps(); !equalDurations(got, []time.Duration{3 * time.Second}) {
		t.Errorf("slept %v, want the second request held 3s", got)
	}
}

func TestRetryAfterBeyondMaxWaitGoesBack(t *testing.T) {
	srv := newServer(t, tooMany("120"), ok)
	clock := newFakeClock()
	tr := newTransport(clock)
	tr.MaxWait = 30 * time.Second
	if resp := get(t, tr, srv.URL); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d, want the 429: 120s is past MaxWait", resp.StatusCode)
	}
	// Nor is the next request held for two minutes: the server decides.
	if resp := get(t, tr, srv.URL); resp.StatusCode != http.StatusOK {
		t.Fatalf("second request: status %d", resp.StatusCode)
	}
	if got := clock.sleeps(); len(got) != 0 {
		t.Errorf("slept %v, want no wait past MaxWait", got)
	}
}

func TestPacesWhenTheBudgetIsSpent(t *testing.T) {
	srv := newServer(t,
		answer(http.StatusOK, "RateLimit", `"free";r=0;t=1`, "RateLimit-Policy", `"free";q=20;w=10`),
		answer(http.StatusOK, "RateLimit", `"free";r=5;t=1`, "RateLimit-Policy", `"free";q=20;w=10`),
		ok, ok)
	clock := newFakeClock()
	tr := newTransport(clock)
	get(t, tr, srv.URL) // says r=0
	get(t, tr, srv.URL) // waits one token (10s / 20), then says r=5
	get(t, tr, srv.URL) // goes at once
	if got := clock.sleeps(); !equalDurations(got, []time.Duration{500 * time.Millisecond}) {
		t.Errorf("slept %v, want one token's refill time [500ms]", got)
	}
	if n := len(srv.requests()); n != 3 {
		t.Errorf("server saw %d requests, want 3", n)
	}
}

func TestPacesByXRateLimitHeaders(t *testing.T) {
	clock := newFakeClock()
	reset := clock.now().Add(3 * time.Second).Unix()
	srv := newServer(t,
		answer(http.StatusOK, "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", strconv.FormatInt(reset, 10)),
		ok)
	tr := newTransport(clock)
	get(t, tr, srv.URL)
	get(t, tr, srv.URL)
	// Without a policy the rate is unknown: wait until the reset.
	if got := clock.sleeps(); !equalDurations(got, []time.Duration{3 * time.Second}) {
		t.Errorf("slept %v, want until X-RateLimit-Reset [3s]", got)
	}
}

func TestWaitersAreReleasedOneTokenApart(t *testing.T) {
	srv := newServer(t, answer(http.StatusOK, "RateLimit", `"free";r=0;t=1`, "RateLimit-Policy", `"free";q=20;w=10`))
	clock := newFakeClock()
	clock.frozen = true // as if the three waited side by side
	tr := newTransport(clock)
	get(t, tr, srv.URL)
	ctx := context.Background()
	for range 3 {
		if err := tr.waitTurn(ctx, tr.key(httptest.NewRequest(http.MethodGet, srv.URL, nil))); err != nil {
			t.Fatal(err)
		}
	}
	want := []time.Duration{500 * time.Millisecond, time.Second, 1500 * time.Millisecond}
	if got := clock.sleeps(); !equalDurations(got, want) {
		t.Errorf("waits %v, want %v: one token apart", got, want)
	}
}

func TestReplaysTheBody(t *testing.T) {
	srv := newServer(t, tooMany("1"), ok)
	clock := newFakeClock()
	req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"report":"q3"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: newTransport(clock)}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
	if got := srv.requests(); len(got) != 2 || got[0] != `{"report":"q3"}` || got[1] != got[0] {
		t.Errorf("server received %q, want the body twice", got)
	}
}

func TestDoesNotRetryABodyItCannotReplay(t *testing.T) {
	srv := newServer(t, tooMany("1"), ok)
	clock := newFakeClock()
	req, err := http.NewRequest(http.MethodPost, srv.URL, io.NopCloser(strings.NewReader("once")))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := newTransport(clock).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d, want the 429 back", resp.StatusCode)
	}
	if n := len(srv.requests()); n != 1 {
		t.Errorf("server saw %d requests, want 1", n)
	}
}

func TestAWaitEndsWithTheContext(t *testing.T) {
	srv := newServer(t, tooMany("20"), ok)
	tr := &Transport{MaxRetries: -1} // the real clock: the wait is cut short
	get(t, tr, srv.URL)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	_, err = tr.RoundTrip(req)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("RoundTrip returned %v, want the context's deadline", err)
	}
	if waited := time.Since(began); waited > 10*time.Second {
		t.Errorf("waited %v for a context of 20ms", waited)
	}
	if n := len(srv.requests()); n != 1 {
		t.Errorf("server saw %d requests, want only the first", n)
	}
}

func TestKeysHaveTheirOwnBudgets(t *testing.T) {
	srv := newServer(t, tooMany("5"), ok)
	clock := newFakeClock()
	tr := newTransport(clock)
	tr.MaxRetries = -1
	tr.Key = func(r *http.Request) string { return r.Header.Get("X-Tenant-ID") }
	send := func(tenant string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set("X-Tenant-ID", tenant)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	send("acme")   // 429
	send("globex") // not held by acme's 429
	if got := clock.sleeps(); len(got) != 0 {
		t.Errorf("slept %v: one tenant's 429 held another's request", got)
	}
}

func TestConcurrentUse(t *testing.T) {
	srv := newServer(t,
		answer(http.StatusOK, "RateLimit", `"free";r=0;t=1`, "RateLimit-Policy", `"free";q=20;w=10`),
		tooMany("1"),
		ok)
	clock := newFakeClock()
	tr := newTransport(clock)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 5 {
				resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
}

func TestParseHeaders(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name string
		kv   []string
		want headers
	}{
		{"tollgate allowed", []string{"RateLimit", `"free";r=19;t=1`, "RateLimit-Policy", `"free";q=20;w=10`},
			headers{hasRemaining: true, remaining: 19, untilMore: time.Second, perToken: 500 * time.Millisecond}},
		{"tollgate denied", []string{"RateLimit", `"free";r=0;t=1`, "RateLimit-Policy", `"free";q=20;w=10`, "Retry-After", "1"},
			headers{hasRemaining: true, untilMore: time.Second, perToken: 500 * time.Millisecond, retryAfter: time.Second}},
		{"spaces and a second member", []string{"RateLimit", ` "a" ; r = 3 ; t = 2 , "b";r=9;t=9`},
			headers{hasRemaining: true, remaining: 3, untilMore: 2 * time.Second}},
		{"several policies: the daily quota binds", []string{
			"RateLimit", `"trial";r=4;t=1, "trial-daily";r=0;t=3600`,
			"RateLimit-Policy", `"trial";q=10;w=2, "trial-daily";q=30;w=86400`},
			headers{hasRemaining: true, untilMore: time.Hour, perToken: 2880 * time.Second}},
		{"several policies: the fewest tokens left bind", []string{
			"RateLimit", `"team";r=89;t=1, "team-reports";r=40;t=72`,
			"RateLimit-Policy", `"team";q=100;w=50, "team-reports";q=50;w=3600`},
			headers{hasRemaining: true, remaining: 40, untilMore: 72 * time.Second, perToken: 72 * time.Second}},
		{"a quoted name with a comma", []string{"RateLimit", `"a,b";r=2;t=3`, "RateLimit-Policy", `"a,b";q=4;w=8`},
			headers{hasRemaining: true, remaining: 2, untilMore: 3 * time.Second, perToken: 2 * time.Second}},
		{"legacy headers", []string{"X-RateLimit-Remaining", "7", "X-RateLimit-Reset", strconv.FormatInt(now.Unix()+5, 10)},
			headers{hasRemaining: true, remaining: 7, untilMore: 5 * time.Second}},
		{"reset in the past", []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1"},
			headers{hasRemaining: true}},
		{"garbage", []string{"RateLimit", `r=x`, "RateLimit-Policy", `"p";q=0;w=10`, "Retry-After", "soon"},
			headers{}},
		{"negative Retry-After", []string{"Retry-After", "-5"}, headers{}},
		{"huge Retry-After", []string{"Retry-After", "99999999999999999"},
			headers{retryAfter: 100 * 365 * 24 * time.Hour}},
		{"nothing", nil, headers{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for i := 0; i+1 < len(tc.kv); i += 2 {
				h.Set(tc.kv[i], tc.kv[i+1])
			}
			if got := parseHeaders(h, now); got != tc.want {
				t.Errorf("parseHeaders(%v) = %+v, want %+v", tc.kv, got, tc.want)
			}
		})
	}
}
