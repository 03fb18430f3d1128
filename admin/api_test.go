package admin_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/admin"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
)

// state is GET api/tenants/{tenant}, as cmd/tollgate reads it.
type state struct {
	Tenant   string `json:"tenant"`
	Plan     string `json:"plan"`
	Allowed  bool   `json:"allowed"`
	Override *struct {
		Tenant    string     `json:"tenant"`
		Plan      string     `json:"plan"`
		Limits    []any      `json:"limits"`
		ExpiresAt *time.Time `json:"expires_at"`
		Reason    string     `json:"reason"`
		SetBy     string     `json:"set_by"`
	} `json:"override"`
	Policies []struct {
		Name         string  `json:"name"`
		Kind         string  `json:"kind"`
		Limit        int64   `json:"limit"`
		Rate         float64 `json:"rate"`
		Remaining    int64   `json:"remaining"`
		ResetSeconds int64   `json:"reset_seconds"`
	} `json:"policies"`
}

func decodeState(t *testing.T, a answer) state {
	t.Helper()
	if a.status != http.StatusOK {
		t.Fatalf("%d: %s", a.status, a.body)
	}
	var s state
	if err := json.Unmarshal([]byte(a.body), &s); err != nil {
		t.Fatalf("%v: %s", err, a.body)
	}
	return s
}

func TestEveryEndpoint(t *testing.T) {
	r := newTestReplica(t, nil)

	// Inspect.
	// Redis's clock runs between the take and the inspect: at 200/s a slow
	// machine gives a token or two back, never all five.
	take(t, r.limiter, "acme", 5)
	s := decodeState(t, r.api(t, "GET", "tenants/acme", ""))
	if s.Tenant != "acme" || s.Plan != "enterprise" || s.Override != nil || !s.Allowed || len(s.Policies) != 1 ||
		s.Policies[0].Name != "enterprise" || s.Policies[0].Limit != 2000 ||
		s.Policies[0].Remaining < 1995 || s.Policies[0].Remaining >= 2000 || s.Policies[0].ResetSeconds != 1 {
		t.Fatalf("inspect acme: %+v", s)
	}
	if a := r.api(t, "HEAD", "tenants/acme", ""); a.status != http.StatusOK {
		t.Fatalf("HEAD: %d", a.status)
	}

	// Override: the answer is the new state, the Limiter applies it.
	s = decodeState(t, r.api(t, "PUT", "tenants/initech/override", `{"plan":"growth","expires_in_seconds":3600,"reason":"weekend"}`))
	if s.Plan != "growth" || s.Override == nil || s.Override.Plan != "growth" || s.Override.Reason != "weekend" || s.Override.SetBy != "admin" ||
		s.Override.ExpiresAt == nil || time.Until(*s.Override.ExpiresAt) < 59*time.Minute || time.Until(*s.Override.ExpiresAt) > time.Hour {
		t.Fatalf("after the override: %+v %+v", s, s.Override)
	}
	if d := take(t, r.limiter, "initech", 1); d.Plan != "growth" {
		t.Fatalf("the Limiter decides initech on %s", d.Plan)
	}

	// List.
	var list struct {
		Overrides []struct{ Tenant, Plan, Reason, SetBy string } `json:"overrides"`
	}
	if err := json.Unmarshal([]byte(r.api(t, "GET", "overrides", "").body), &list); err != nil || len(list.Overrides) != 1 || list.Overrides[0].Tenant != "initech" {
		t.Fatalf("overrides: %+v %v", list, err)
	}

	// Clear.
	s = decodeState(t, r.api(t, "DELETE", "tenants/initech/override?reason=weekend+over", ""))
	if s.Plan != "startup" || s.Override != nil {
		t.Fatalf("after clearing: %+v", s)
	}

	// Reset.
	take(t, r.limiter, "globex", 30)
	s = decodeState(t, r.api(t, "POST", "tenants/globex/reset", `{"reason":"throttled by mistake"}`))
	if s.Policies[0].Remaining != 500 {
		t.Fatalf("after a reset: %+v", s)
	}
	if d := inspect(t, r.limiter, "globex"); d.Remaining != 500 {
		t.Fatalf("the Limiter after a reset: %d left", d.Remaining)
	}
	// A reset needs no body (the reason is then empty).
	if a := r.api(t, "POST", "tenants/globex/reset", ""); a.status != http.StatusOK {
		t.Fatalf("reset without a body: %d %s", a.status, a.body)
	}

	// The change log, newest first, with reasons and labels.
	var log struct {
		Changes []struct {
			Tenant, Action, Plan, Reason, By string
			Time                             time.Time
		} `json:"changes"`
	}
	if err := json.Unmarshal([]byte(r.api(t, "GET", "changes", "").body), &log); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range log.Changes {
		got = append(got, c.Tenant+" "+c.Action+" "+c.Plan+" "+c.Reason+" "+c.By)
	}
	want := []string{"globex reset   admin", "globex reset  throttled by mistake admin", "initech clear  weekend over admin", "initech override growth weekend admin"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("changes:\n%q\nwant\n%q", got, want)
	}

	// Candidates: the insights Report.
	take(t, r.limiter, "hooli", 30)
	var rep struct {
		Window     string `json:"window"`
		Candidates []struct {
			Tenant            string `json:"tenant"`
			ThrottledRequests int64  `json:"throttled_requests"`
			ThrottledTokens   int64  `json:"throttled_tokens"`
		} `json:"candidates"`
	}
	if err := json.Unmarshal([]byte(r.api(t, "GET", "candidates?window=1h&n=5", "").body), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Window != "1h" || len(rep.Candidates) != 1 || rep.Candidates[0].Tenant != "hooli" || rep.Candidates[0].ThrottledRequests != 10 {
		t.Fatalf("candidates: %+v", rep)
	}

	// Every change was logged by the Limiter with its reason and label.
	logged := r.logs.find("rate limiter change")
	if len(logged) != 4 || logged[0]["by"] != "admin" || logged[0]["reason"] != "weekend" || logged[0]["tenant_id"] != "initech" {
		t.Fatalf("logged changes: %v", logged)
	}

	// The page, as HTML and as JSON.
	page := r.do(t, "GET", "", "", "Authorization", "Bearer "+token)
	if page.status != 200 || page.header.Get("Content-Type") != "text/html; charset=utf-8" || !strings.Contains(page.body, "hooli") {
		t.Fatalf("the page: %d %s", page.status, page.header.Get("Content-Type"))
	}
	for _, path := range []string{"?format=json&window=1h", "/?format=json&window=1h"} {
		var pj struct {
			Window     string           `json:"window"`
			Candidates []map[string]any `json:"candidates"`
			Overrides  []map[string]any `json:"overrides"`
			Changes    []map[string]any `json:"changes"`
		}
		a := r.do(t, "GET", path, "", "Authorization", "Bearer "+token)
		if err := json.Unmarshal([]byte(a.body), &pj); err != nil || pj.Window != "1h" || len(pj.Candidates) != 1 ||
			pj.Candidates[0]["throttled_requests"] != float64(10) || pj.Overrides == nil || len(pj.Changes) != 4 {
			t.Fatalf("the page's JSON at %q: %v\n%s", path, err, a.body)
		}
	}
}

// TestLimitsOverride: the limits format, a bucket's rate and burst or a
// quota's tokens, and its mistakes.
func TestLimitsOverride(t *testing.T) {
	r := newTestReplica(t, nil)
	take(t, r.limiter, "umbrella", 4)
	s := decodeState(t, r.api(t, "PUT", "tenants/umbrella/override",
		`{"limits":[{"name":"trial","rate":1,"burst":40},{"name":"trial-daily","tokens":300}],"reason":"demo day"}`))
	if s.Plan != "trial+override" || s.Override == nil || s.Override.Plan != "" || len(s.Override.Limits) != 2 {
		t.Fatalf("after a limits override: %+v", s)
	}
	byName := map[string]int64{}
	for _, p := range s.Policies {
		byName[p.Name+" limit"], byName[p.Name+" remaining"] = p.Limit, p.Remaining
	}
	// Usage carries over: no fresh burst (a bucket's state is a time, so
	// 4 tokens spent at 5/s are 0.8 s, a token of the new 1/s), and 4 of
	// the quota's 300.
	if byName["trial+override limit"] != 40 || byName["trial+override remaining"] != 39 ||
		byName["trial-daily limit"] != 300 || byName["trial-daily remaining"] != 296 {
		t.Fatalf("policies: %v", byName)
	}
	// The bucket may be named as the page shows it, with +override.
	if a := r.api(t, "PUT", "tenants/umbrella/override", `{"limits":[{"name":"trial+override","rate":2,"burst":60}]}`); a.status != 200 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	for _, c := range []struct{ body, want string }{
		{`{"limits":[{"name":"nope","rate":1,"burst":5}]}`, `has no policy "nope"`},
		{`{"limits":[{"name":"trial","rate":1,"burst":5,"tokens":3}]}`, "not both"},
		{`{"limits":[{"name":"trial"}]}`, "not both"},
		{`{"limits":[{"rate":1,"burst":5}]}`, "name must name the policy"},
		{`{"limits":[{"name":"trial","rate":-1,"burst":5}]}`, "Rate must be > 0"},
		{`{"limits":[{"name":"trial","rate":1,"burst":0}]}`, "Burst must be >= 1"},
		{`{"limits":[{"name":"trial-daily","tokens":-3}]}`, "tokens must be >= 1"},
		{`{"plan":"growth","limits":[{"name":"nope","rate":1,"burst":5}]}`, `policy "nope"`},
		{`{"reason":"nothing"}`, "needs a plan, or limits"},
	} {
		a := r.api(t, "PUT", "tenants/umbrella/override", c.body)
		if a.status != http.StatusBadRequest || !strings.Contains(a.json(t)["error"].(string), c.want) {
			t.Errorf("%s: %d %s; want 400 saying %q", c.body, a.status, a.body, c.want)
		}
	}
}

// TestMalformedRequests: every malformed request gets a 4xx and a JSON
// reason, and changes nothing.
func TestMalformedRequests(t *testing.T) {
	r := newTestReplica(t, nil)
	long := strings.Repeat("x", 300)
	cases := []struct {
		method, path, body string
		status             int
	}{
		{"PUT", "tenants/acme/override", `{"plan":"growth"`, 400},
		{"PUT", "tenants/acme/override", `{"plan":"growth","colour":"red"}`, 400},
		{"PUT", "tenants/acme/override", `{"plan":"platinum"}`, 400},
		{"PUT", "tenants/acme/override", `{"plan":"growth","expires_in_seconds":0}`, 400},
		{"PUT", "tenants/acme/override", `{"plan":"growth","expires_in_seconds":-5}`, 400},
		{"PUT", "tenants/acme/override", `{"plan":"growth","expires_in_seconds":1.5}`, 400},
		{"PUT", "tenants/acme/override", `{"plan":"growth","expires_in_seconds":9999999999999}`, 400},
		{"PUT", "tenants/acme/override", `{"plan":"growth","expires_in_seconds":"soon"}`, 400},
		{"PUT", "tenants/acme/override", `{"plan":"growth"} {"plan":"free"}`, 400},
		{"PUT", "tenants/acme/override", ``, 400},
		{"PUT", "tenants/acme/override", `[]`, 400},
		{"PUT", "tenants/acme/override", `{"plan":"growth","reason":"two\nlines"}`, 400},
		{"PUT", "tenants/acme/override", `{"plan":"growth","reason":"` + strings.Repeat("r", 501) + `"}`, 400},
		{"PUT", "tenants/acme/override", `{"plan":"` + strings.Repeat("p", 100000) + `"}`, 400},
		{"PUT", "tenants/" + long + "/override", `{"plan":"growth"}`, 400},
		{"PUT", "tenants/a%00b/override", `{"plan":"growth"}`, 400},
		{"PUT", "tenants/a%0Ab/override", `{"plan":"growth"}`, 400},
		{"POST", "tenants/a%1Bb/reset", `{}`, 400},
		{"POST", "tenants/acme/reset", `{"reason":"x","extra":1}`, 400},
		{"POST", "tenants/acme/reset", `not json`, 400},
		{"POST", "tenants/acme/reset", `{"reason":"bell\u0007"}`, 400},
		{"DELETE", "tenants/acme/override?reson=typo", ``, 400},
		{"DELETE", "tenants/acme/override", `{"reason":"in the body"}`, 400},
		{"DELETE", "tenants/acme/override?reason=a%0Ab", ``, 400},
		{"GET", "tenants/" + long, ``, 400},
		{"GET", "tenants/a%7Fb", ``, 400},
		{"GET", "tenants/", ``, 404},
		{"GET", "candidates?window=2h", ``, 400},
		{"GET", "candidates?n=0", ``, 400},
		{"GET", "candidates?n=100000", ``, 400},
		{"PATCH", "tenants/acme/override", `{}`, 405},
		{"GET", "tenants/acme/reset", ``, 405},
		{"POST", "tenants/acme", ``, 405},
		{"DELETE", "overrides", ``, 405},
		{"GET", "tenants/acme/override/extra", ``, 404},
		{"GET", "nothing", ``, 404},
	}
	for _, c := range cases {
		a := r.api(t, c.method, c.path, c.body)
		if a.status != c.status || a.header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s %.60q: %d %s, want %d and JSON", c.method, c.path, c.body, a.status, a.header.Get("Content-Type"), c.status)
			continue
		}
		if reason, _ := a.json(t)["error"].(string); reason == "" {
			t.Errorf("%s %s: no reason: %s", c.method, c.path, a.body)
		}
	}
	// The page's mistakes too.
	for _, c := range []struct{ path, accept string }{{"?format=xml", ""}, {"?window=1y", ""}, {"/elsewhere", ""}} {
		a := r.do(t, "GET", c.path, "", "Authorization", "Bearer "+token)
		if a.status/100 != 4 || a.header.Get("Content-Type") != "application/json" {
			t.Errorf("GET %s: %d %s", c.path, a.status, a.header.Get("Content-Type"))
		}
	}
	for _, c := range []struct{ ctype, body string }{
		{"application/json", `{"action":"reset","tenant":"acme"}`},
		{"application/x-www-form-urlencoded", "action=reset&tenant=acme&colour=red"},
		{"application/x-www-form-urlencoded", "action=reset&tenant=acme&tenant=globex"},
		{"application/x-www-form-urlencoded", "action=explode&tenant=acme"},
		{"application/x-www-form-urlencoded", "action=override&tenant=acme&plan=growth&for=-3h"},
		{"application/x-www-form-urlencoded", "action=override&tenant=acme&plan=growth&for=soon"},
		{"application/x-www-form-urlencoded", "action=override&tenant=acme&plan=platinum"},
		{"application/x-www-form-urlencoded", "action=reset&tenant=%00"},
		{"application/x-www-form-urlencoded", "action=reset&tenant=acme&reason=%0D%0Aforged"},
		{"application/x-www-form-urlencoded", "%zz"},
	} {
		a := r.do(t, "POST", "", c.body, "Authorization", "Bearer "+token, "Content-Type", c.ctype)
		if a.status/100 != 4 || a.header.Get("Content-Type") != "application/json" || a.json(t)["error"] == "" {
			t.Errorf("POST the page %q: %d %s %s", c.body, a.status, a.header.Get("Content-Type"), a.body)
		}
	}
	if changes, _ := r.limiter.Changes(t.Context()); len(changes) != 0 {
		t.Fatalf("malformed requests made changes: %+v", changes)
	}
}

// TestInspectSpendsNothing: inspecting, through the API or the page,
// takes no token. The daily quota, which nothing refills, counts exactly;
// the buckets refill on Redis's clock while the test runs (the plan's
// 5/s, a token every 200 ms), so inspecting must only never lower them.
func TestInspectSpendsNothing(t *testing.T) {
	r := newTestReplica(t, nil)
	take(t, r.limiter, "umbrella", 3)
	check := func(spent int64) {
		t.Helper()
		s := decodeState(t, r.api(t, "GET", "tenants/umbrella", ""))
		quotas := 0
		for _, p := range s.Policies {
			if p.Kind == "quota" {
				quotas++
			}
			want := p.Limit - spent
			if p.Name == "reports" {
				want = p.Limit
			}
			if p.Kind == "quota" && p.Remaining != want || p.Kind == "bucket" && p.Remaining < want {
				t.Fatalf("after %d requests: %+v", spent, s.Policies)
			}
		}
		if quotas != 1 {
			t.Fatalf("%d quotas in umbrella's plan, want its daily one: %+v", quotas, s.Policies)
		}
	}
	for range 5 {
		check(3)
		if a := r.do(t, "GET", "?tenant=umbrella", "", "Authorization", "Bearer "+token); a.status != 200 {
			t.Fatal(a.status)
		}
	}
	take(t, r.limiter, "umbrella", 1)
	check(4) // 3 spent before, this one, nothing by inspecting
}

// TestTenantIDsInPaths: a tenant ID holding "/", spaces, "%" or bytes that
// are not UTF-8 is one path segment, escaped as cmd/tollgate escapes it.
func TestTenantIDsInPaths(t *testing.T) {
	r := newTestReplica(t, nil)
	for _, tenant := range []string{"a/b c", "50%", "t\xff", "\u202egnp.exe", "?x=1#y", "über"} {
		a := r.api(t, "PUT", "tenants/"+url.PathEscape(tenant)+"/override", `{"plan":"growth"}`)
		if s := decodeState(t, a); s.Plan != "growth" {
			t.Fatalf("%q: %+v", tenant, s)
		}
		if d := take(t, r.limiter, tenant, 1); d.Plan != "growth" {
			t.Fatalf("%q: the Limiter decides on %s", tenant, d.Plan)
		}
	}
}

// TestNoTracker: without a Tracker, the candidates are a 404 and the page
// says so.
func TestNoTracker(t *testing.T) {
	r := newTestReplica(t, func(c *admin.Config) { c.Tracker = nil })
	if a := r.api(t, "GET", "candidates", ""); a.status != http.StatusNotFound || a.json(t)["error"] == nil {
		t.Fatalf("%d %s", a.status, a.body)
	}
	a := r.do(t, "GET", "", "", "Authorization", "Bearer "+token)
	if a.status != 200 || !strings.Contains(a.body, `id="no-tracker"`) {
		t.Fatalf("%d", a.status)
	}
	a = r.do(t, "GET", "?format=json", "", "Authorization", "Bearer "+token)
	if a.status != 200 || a.json(t)["overrides"] == nil {
		t.Fatalf("%d %s", a.status, a.body)
	}
}

func TestConfigMistakesNameTheField(t *testing.T) {
	l := newTestReplica(t, nil).limiter
	for _, c := range []struct {
		cfg  admin.Config
		want string
	}{
		{admin.Config{Tokens: map[string]string{"admin": "x"}}, "Config.Limiter"},
		{admin.Config{Limiter: l}, "Config.Tokens is empty"},
		{admin.Config{Limiter: l, Tokens: map[string]string{"admin": ""}}, `Config.Tokens["admin"]: the token is empty`},
		{admin.Config{Limiter: l, Tokens: map[string]string{"": "x"}}, "label"},
		{admin.Config{Limiter: l, Tokens: map[string]string{"a\nb": "x"}}, "label"},
		{admin.Config{Limiter: l, Tokens: map[string]string{"admin": "a b"}}, "space"},
		{admin.Config{Limiter: l, Tokens: map[string]string{"admin": "x", "desk": "x"}}, "same token"},
	} {
		if _, err := admin.New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v; want an error saying %q", c.cfg.Tokens, err, c.want)
		}
	}
}

// ExampleNew mounts the handler where the example applications do.
func ExampleNew() {
	plans, _ := tollgate.NewStaticResolver(tollgate.DefaultPlans(), "free", nil)
	limiter, _ := tollgate.New(memory.New(), plans)
	h, err := admin.New(admin.Config{
		Limiter: limiter,
		Tokens:  map[string]string{"admin": os.Getenv("ADMIN_TOKEN")},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/tollgate", http.StripPrefix("/admin/tollgate", h))
	mux.Handle("/admin/tollgate/", http.StripPrefix("/admin/tollgate", h))
}
