package admin_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/admin"
)

func TestCredentials(t *testing.T) {
	r := newTestReplica(t, nil)
	for _, c := range []struct {
		auth   string
		status int
	}{
		{"Bearer " + token, 200},
		{"bearer " + token, 200},
		{"Bearer " + otherToken, 200},
		{basic("anyone", token), 200},
		{basic("", token), 200},
		{"", 401},
		{"Bearer wrong", 401},
		{"Bearer " + token[:len(token)-1], 401},
		{"Bearer " + token + "x", 401},
		{"Bearer", 401},
		{basic(token, "wrong"), 401},
		{"Basic " + token, 401}, // not base64 of user:password
		{token, 401},
		{"Token " + token, 401},
		{"Digest username=admin", 401},
	} {
		a := r.do(t, "GET", "/api/overrides", "", "Authorization", c.auth)
		if a.status != c.status {
			t.Errorf("Authorization %q: %d, want %d", c.auth, a.status, c.status)
		}
		if c.status == 401 && (a.header.Get("WWW-Authenticate") != `Basic realm="tollgate", charset="UTF-8"` || a.json(t)["error"] == "") {
			t.Errorf("Authorization %q: WWW-Authenticate %q, body %s", c.auth, a.header.Get("WWW-Authenticate"), a.body)
		}
	}
}

// TestNoChangeWithoutCredentials: every endpoint and the page's forms
// answer 401 to a request without valid credentials, and change nothing.
func TestNoChangeWithoutCredentials(t *testing.T) {
	r := newTestReplica(t, nil)
	requests := []struct{ method, path, body string }{
		{"GET", "", ""},
		{"GET", "?format=json", ""},
		{"POST", "", "action=reset&tenant=acme"},
		{"GET", "/api/tenants/acme", ""},
		{"PUT", "/api/tenants/acme/override", `{"plan":"free"}`},
		{"DELETE", "/api/tenants/acme/override", ""},
		{"POST", "/api/tenants/acme/reset", `{}`},
		{"GET", "/api/overrides", ""},
		{"GET", "/api/changes", ""},
		{"GET", "/api/candidates", ""},
		{"GET", "/api/nothing", ""},
	}
	// 22 wrong credentials from one address: the last get 429.
	for _, auth := range []string{"", "Bearer nope", basic("admin", "nope")} {
		for _, q := range requests {
			a := r.do(t, q.method, q.path, q.body, "Authorization", auth, "Content-Type", "application/x-www-form-urlencoded")
			if a.status != http.StatusUnauthorized && a.status != http.StatusTooManyRequests {
				t.Errorf("%q %s %s: %d", auth, q.method, q.path, a.status)
			}
		}
	}
	if changes, _ := r.limiter.Changes(t.Context()); len(changes) != 0 {
		t.Fatalf("changes without credentials: %+v", changes)
	}
}

// TestFailuresLockOut: a client address that fails 20 times within a
// minute gets 429, whatever it sends, until that minute is over; other
// addresses do not.
func TestFailuresLockOut(t *testing.T) {
	clk := &clock{now: time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)}
	proxies, _ := netip.ParsePrefix("127.0.0.0/8")
	r := newTestReplica(t, func(c *admin.Config) {
		admin.WithClock(c, clk.Now)
		c.TrustedProxies = []netip.Prefix{proxies}
	})
	from := func(addr, auth string) answer {
		return r.do(t, "GET", "/api/overrides", "", "X-Forwarded-For", addr, "Authorization", auth)
	}
	for i := range admin.MaxFailures {
		if a := from("203.0.113.7", "Bearer guess-"+fmt.Sprint(i)); a.status != 401 {
			t.Fatalf("failure %d: %d", i+1, a.status)
		}
		clk.add(time.Second)
	}
	// 20 s after the first failure: locked out for 40 s more, even with
	// the right token.
	for _, auth := range []string{"Bearer another-guess", "Bearer " + token} {
		a := from("203.0.113.7", auth)
		if a.status != http.StatusTooManyRequests || a.header.Get("Retry-After") != "40" || a.json(t)["error"] == "" {
			t.Fatalf("%s after 20 failures: %d, Retry-After %q", auth, a.status, a.header.Get("Retry-After"))
		}
	}
	if a := from("203.0.113.8", "Bearer "+token); a.status != 200 {
		t.Fatalf("another address: %d", a.status)
	}
	// The same /64 is the same client.
	for range admin.MaxFailures {
		from("2001:db8:1:2::1", "Bearer guess")
	}
	if a := from("2001:db8:1:2::ffff", "Bearer "+token); a.status != http.StatusTooManyRequests {
		t.Fatalf("another address of the /64: %d", a.status)
	}
	clk.add(39 * time.Second)
	if a := from("203.0.113.7", "Bearer "+token); a.status != http.StatusTooManyRequests || a.header.Get("Retry-After") != "1" {
		t.Fatalf("a second before the minute is over: %d, Retry-After %q", a.status, a.header.Get("Retry-After"))
	}
	clk.add(time.Second)
	if a := from("203.0.113.7", "Bearer "+token); a.status != 200 {
		t.Fatalf("once the minute is over: %d", a.status)
	}
	// A fresh minute: one failure is one of 20 again.
	if a := from("203.0.113.7", "Bearer guess"); a.status != 401 {
		t.Fatalf("the first failure of a new minute: %d", a.status)
	}
	if a := from("203.0.113.7", "Bearer "+token); a.status != 200 {
		t.Fatalf("after one failure of a new minute: %d", a.status)
	}
	locked := r.logs.find("tollgate admin: client locked out after failed credentials")
	if len(locked) != 2 || locked[0]["client"] != "203.0.113.7" || locked[1]["client"] != "2001:db8:1:2::/64" {
		t.Fatalf("lockouts logged: %v", locked)
	}
	// Without credentials there is nothing to guess, and nothing counts.
	for range 3 * admin.MaxFailures {
		from("203.0.113.9", "")
	}
	if a := from("203.0.113.9", "Bearer "+token); a.status != 200 {
		t.Fatalf("after requests without credentials: %d", a.status)
	}
}

// TestFailureCountsAreBounded: a client rotating its addresses fills the
// table of counts up to its bound, then shares one count with every other
// new address, so rotating buys no more guesses.
func TestFailureCountsAreBounded(t *testing.T) {
	clk := &clock{now: time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)}
	r := newTestReplica(t, nil)
	cfg := admin.Config{Limiter: r.limiter, Tokens: map[string]string{"admin": token}, Logger: r.logsLogger()}
	admin.WithClock(&cfg, clk.Now)
	h, err := admin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	status := func(i int, auth string) int {
		req := httptest.NewRequest("GET", "/api/overrides", nil)
		req.RemoteAddr = netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String() + ":4000"
		req.Header.Set("Authorization", auth)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	for i := range admin.MaxAddresses {
		status(i, "Bearer guess")
	}
	if n := admin.FailureAddresses(h); n != admin.MaxAddresses {
		t.Fatalf("%d addresses counted, want %d", n, admin.MaxAddresses)
	}
	for i := range admin.MaxFailures {
		if got := status(admin.MaxAddresses+i, "Bearer guess"); got != 401 {
			t.Fatalf("new address %d: %d", i, got)
		}
	}
	if got := status(admin.MaxAddresses+admin.MaxFailures, "Bearer "+token); got != http.StatusTooManyRequests {
		t.Fatalf("a new address once the shared count is spent: %d", got)
	}
	if n := admin.FailureAddresses(h); n != admin.MaxAddresses {
		t.Fatalf("%d addresses counted, want at most %d", n, admin.MaxAddresses)
	}
	// Once their minute is over, the counts are forgotten.
	clk.add(admin.FailureWindow)
	if got := status(1<<22, "Bearer "+token); got != 200 {
		t.Fatalf("a new address a minute later: %d", got)
	}
	status(1<<22+1, "Bearer guess")
	if n := admin.FailureAddresses(h); n != 1 {
		t.Fatalf("%d addresses counted after a minute, want 1", n)
	}
}

// TestWrongTokensCost measures a client that sends 300 wrong tokens in a
// row: 20 are checked, the other 280 get 429 unchecked.
func TestWrongTokensCost(t *testing.T) {
	r := newTestReplica(t, nil)
	statuses := map[int]int{}
	start := time.Now()
	for i := range 300 {
		statuses[r.do(t, "GET", "/api/overrides", "", "Authorization", fmt.Sprintf("Bearer guess-%d", i)).status]++
	}
	took := time.Since(start)
	t.Logf("300 wrong tokens: %v (%v each); %d × 401, %d × 429", took, took/300, statuses[401], statuses[429])
	if statuses[401] != admin.MaxFailures || statuses[429] != 300-admin.MaxFailures {
		t.Fatalf("statuses %v", statuses)
	}
}

// TestCrossSiteChangesRefused: a change authenticated with Basic
// credentials, which a browser sends on its own, needs the page's
// anti-forgery token; one that a browser says came from another site is
// refused whatever its credentials; Bearer credentials need no token.
func TestCrossSiteChangesRefused(t *testing.T) {
	r := newTestReplica(t, nil)
	csrf := admin.CSRFToken(token)
	auth := basic("admin", token)
	form := "application/x-www-form-urlencoded"
	refused := []struct {
		name                     string
		method, path, body, ctyp string
		headers                  []string
	}{
		{"API PUT, Basic, no token", "PUT", "/api/tenants/acme/override", `{"plan":"free"}`, "application/json", nil},
		{"API POST, Basic, no token", "POST", "/api/tenants/acme/reset", `{}`, "application/json", nil},
		{"API DELETE, Basic, no token", "DELETE", "/api/tenants/acme/override", "", "", nil},
		{"API PUT, Basic, wrong token", "PUT", "/api/tenants/acme/override", `{"plan":"free"}`, "application/json", []string{"X-CSRF-Token", csrf[1:] + "x"}},
		{"API PUT, Basic, the other credential's token", "PUT", "/api/tenants/acme/override", `{"plan":"free"}`, "application/json", []string{"X-CSRF-Token", admin.CSRFToken(otherToken)}},
		{"form, Basic, no token", "POST", "", "action=reset&tenant=acme", form, nil},
		{"form, Basic, wrong token", "POST", "", "action=reset&tenant=acme&csrf=abc", form, nil},
		{"form, token in the query", "POST", "?csrf=" + url.QueryEscape(csrf), "action=reset&tenant=acme", form, nil},
		{"form from another site", "POST", "", "action=reset&tenant=acme&csrf=" + csrf, form, []string{"Sec-Fetch-Site", "cross-site"}},
		{"form from another origin", "POST", "", "action=reset&tenant=acme&csrf=" + csrf, form, []string{"Origin", "https://evil.example"}},
		{"API from another site, Bearer", "POST", "/api/tenants/acme/reset", `{}`, "application/json", []string{"Sec-Fetch-Site", "cross-site", "Authorization", "Bearer " + token}},
	}
	for _, c := range refused {
		h := append([]string{"Authorization", auth, "Content-Type", c.ctyp}, c.headers...)
		a := r.do(t, c.method, c.path, c.body, h...)
		if a.status != http.StatusForbidden || a.json(t)["error"] == "" {
			t.Errorf("%s: %d %s", c.name, a.status, a.body)
		}
	}
	if changes, _ := r.limiter.Changes(t.Context()); len(changes) != 0 {
		t.Fatalf("refused requests made changes: %+v", changes)
	}

	accepted := []struct {
		name                     string
		method, path, body, ctyp string
		headers                  []string
		status                   int
	}{
		{"form, Basic, token, same origin", "POST", "", "action=reset&tenant=acme&csrf=" + csrf, form, []string{"Sec-Fetch-Site", "same-origin", "Origin", r.srv.URL}, 303},
		{"API, Basic, token header", "POST", "/api/tenants/acme/reset", `{}`, "application/json", []string{"X-CSRF-Token", csrf}, 200},
		{"API, Bearer, no token", "POST", "/api/tenants/acme/reset", `{}`, "application/json", []string{"Authorization", "Bearer " + token}, 200},
		{"form, Bearer, no token", "POST", "", "action=reset&tenant=acme", form, []string{"Authorization", "Bearer " + token}, 303},
		{"GET needs no token", "GET", "", "", "", nil, 200},
	}
	for _, c := range accepted {
		h := append([]string{"Authorization", auth, "Content-Type", c.ctyp}, c.headers...)
		if a := r.do(t, c.method, c.path, c.body, h...); a.status != c.status {
			t.Errorf("%s: %d %s", c.name, a.status, a.body)
		}
	}
	if changes, _ := r.limiter.Changes(t.Context()); len(changes) != 4 {
		t.Fatalf("%d changes, want 4", len(changes))
	}
	// The token is the same on every replica with the same credentials,
	// and the page embeds it.
	other := newTestReplica(t, nil)
	page := other.do(t, "GET", "", "", "Authorization", auth)
	if !strings.Contains(page.body, `name="csrf" value="`+csrf+`"`) {
		t.Fatal("the page of another replica does not embed the same token")
	}
}
