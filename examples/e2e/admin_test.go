package e2e

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core/redistest"
)

const adminToken = "e2e-admin-token"

// bearer is the Authorization of the admin token.
const bearer = "Bearer " + adminToken

// adminAPI sends a request to the app's admin API with auth as its
// Authorization.
func adminAPI(t *testing.T, a *app, method, path string, body any, auth string) response {
	t.Helper()
	return send(t, method, a.url+"/admin/tollgate/api/"+path, body, "Authorization", auth)
}

// inspect returns the admin API's view of tenant.
func inspect(t *testing.T, a *app, tenant string) map[string]any {
	t.Helper()
	r := adminAPI(t, a, http.MethodGet, "tenants/"+tenant, nil, bearer)
	if r.status != http.StatusOK {
		t.Fatalf("GET tenants/%s: %d (%s)", tenant, r.status, r.body)
	}
	return r.json(t)
}

// remaining returns the tokens left in the first policy of an inspection.
func remaining(t *testing.T, state map[string]any) float64 {
	t.Helper()
	policies, _ := state["policies"].([]any)
	if len(policies) == 0 {
		t.Fatalf("no policies in %v", state)
	}
	return policies[0].(map[string]any)["remaining"].(float64)
}

// candidate returns tenant's upgrade candidacy of the last hour.
func candidate(t *testing.T, a *app, tenant string) map[string]any {
	t.Helper()
	r := adminAPI(t, a, http.MethodGet, "candidates?window=1h&n=200", nil, bearer)
	var rep struct{ Candidates []map[string]any }
	if r.status != http.StatusOK || json.Unmarshal(r.body, &rep) != nil {
		t.Fatalf("GET candidates: %d (%s)", r.status, r.body)
	}
	for _, c := range rep.Candidates {
		if c["tenant"] == tenant {
			return c
		}
	}
	t.Fatalf("%s is not among the candidates %s", tenant, r.body)
	return nil
}

func basic(user, password string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
}

// TestAdminAPI: each app serves the operator's page and API with
// ADMIN_TOKEN, to the token only (Bearer, or Basic with the token as the
// password); inspecting spends nothing; an override, a reset and a clear
// take effect at once.
func TestAdminAPI(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, name string) {
		off := start(t, name, nil)
		for _, path := range []string{"/admin/tollgate", "/admin/tollgate/api/overrides"} {
			if r := send(t, http.MethodGet, off.url+path, nil, "Authorization", bearer); r.status != http.StatusNotFound {
				t.Errorf("without ADMIN_TOKEN, GET %s: %d, want 404", path, r.status)
			}
		}

		a := start(t, name, []string{"ADMIN_TOKEN=" + adminToken})
		for _, auth := range []string{"", "Bearer wrong", basic("ops", "wrong"), adminToken} {
			r := adminAPI(t, a, http.MethodGet, "overrides", nil, auth)
			if r.status != http.StatusUnauthorized || !strings.HasPrefix(r.header.Get("WWW-Authenticate"), `Basic realm="tollgate"`) {
				t.Errorf("Authorization %q: %d, WWW-Authenticate %q; want 401 and Basic realm=\"tollgate\"", auth, r.status, r.header.Get("WWW-Authenticate"))
			}
		}
		// A browser logs in with Basic, any user name, the token as the
		// password.
		for _, path := range []string{"/admin/tollgate", "/admin/tollgate/"} {
			r := send(t, http.MethodGet, a.url+path, nil, "Authorization", basic("ops", adminToken))
			if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
				t.Errorf("GET %s with Basic: %d %s, want the page", path, r.status, r.header.Get("Content-Type"))
			}
		}

		tenant := unique("admin")
		do(t, http.MethodGet, a.url+"/api/hello", tenant)
		for range 3 {
			if st := inspect(t, a, tenant); st["plan"] != "free" || st["override"] != nil || remaining(t, st) < 19 {
				t.Fatalf("inspect %s: %v, want free, no override, 19 tokens or more", tenant, st)
			}
		}
		if r := do(t, http.MethodGet, a.url+"/api/hello", tenant); r.int(t, "X-RateLimit-Remaining") < 18 {
			t.Errorf("after three inspections, X-RateLimit-Remaining = %s: inspecting spent tokens", r.header.Get("X-RateLimit-Remaining"))
		}

		r := adminAPI(t, a, http.MethodPut, "tenants/"+tenant+"/override", map[string]any{"plan": "no-such-plan"}, bearer)
		if r.status != http.StatusBadRequest {
			t.Errorf("an override to an unknown plan: %d, want 400 (%s)", r.status, r.body)
		}
		r = adminAPI(t, a, http.MethodPut, "tenants/"+tenant+"/override",
			map[string]any{"plan": "growth", "expires_in_seconds": 3600, "reason": "e2e"}, bearer)
		if r.status/100 != 2 {
			t.Fatalf("PUT override: %d (%s)", r.status, r.body)
		}
		if h := do(t, http.MethodGet, a.url+"/api/hello", tenant); h.header.Get("X-RateLimit-Limit") != "500" {
			t.Errorf("after the override to growth: X-RateLimit-Limit = %q, want 500", h.header.Get("X-RateLimit-Limit"))
		}
		st := inspect(t, a, tenant)
		override, _ := st["override"].(map[string]any)
		if st["plan"] != "growth" || override["plan"] != "growth" || override["reason"] != "e2e" || override["expires_at"] == nil {
			t.Errorf("inspect after the override: %v", st)
		}

		// A reset makes every policy full again.
		for do(t, http.MethodPost, a.url+"/api/reports", tenant).status != http.StatusTooManyRequests {
		}
		if r := adminAPI(t, a, http.MethodPost, "tenants/"+tenant+"/reset", map[string]any{"reason": "e2e"}, bearer); r.status/100 != 2 {
			t.Fatalf("POST reset: %d (%s)", r.status, r.body)
		}
		h := do(t, http.MethodPost, a.url+"/api/reports", tenant)
		if rl := h.header.Get("RateLimit"); h.status != http.StatusAccepted ||
			!strings.HasPrefix(rl, `"growth";r=490;`) || !strings.Contains(rl, `"growth-reports";r=40;`) {
			t.Errorf("a report after the reset: %d, RateLimit %q; want 202, growth at 490 and its reports budget at 40", h.status, rl)
		}

		if r := adminAPI(t, a, http.MethodDelete, "tenants/"+tenant+"/override?reason=e2e", nil, bearer); r.status/100 != 2 {
			t.Fatalf("DELETE override: %d (%s)", r.status, r.body)
		}
		if h := do(t, http.MethodGet, a.url+"/api/hello", tenant); h.header.Get("X-RateLimit-Limit") != "20" {
			t.Errorf("after the override was cleared: X-RateLimit-Limit = %q, want 20", h.header.Get("X-RateLimit-Limit"))
		}
	})
}

// TestReplicasOnOneRedis runs two replicas of each app on one Redis: they
// share one budget, and an override or a reset made through one holds on
// the other within 100 ms, and on a replica started later from its first
// request.
func TestReplicasOnOneRedis(t *testing.T) {
	each(t, func(t *testing.T, name string) {
		env := []string{"REDIS_URL=redis://" + redistest.Start(t).Addr() + "/0", "ADMIN_TOKEN=" + adminToken}
		replicas := []*app{start(t, name, env), start(t, name, env)}

		tenant := unique("shared")
		allowed, failedOpen := 0, 0
		began := time.Now()
		for i := range 40 {
			r := do(t, http.MethodGet, replicas[i%2].url+"/api/hello", tenant)
			switch {
			case r.failedOpen():
				failedOpen++
			case r.status == http.StatusOK:
				allowed++
			}
		}
		// A request that failed open is no evidence either way, and may
		// have been counted, late.
		if budget := 20 + int(2*time.Since(began).Seconds()) + 1; allowed+failedOpen < 20 || allowed > budget || failedOpen > 20 {
			t.Errorf("the two replicas allowed %d of 40 (and %d failed open), want 20 to %d: one budget", allowed, failedOpen, budget)
		}

		// An override through one replica holds on the other within
		// 100 ms: the median of five tries, which a loaded machine may
		// delay now and then.
		var took []time.Duration
		for try := range 5 {
			tenant = unique(fmt.Sprint("override", try))
			r := adminAPI(t, replicas[0], http.MethodPut, "tenants/"+tenant+"/override", map[string]any{"plan": "enterprise", "reason": "e2e"}, bearer)
			if r.status/100 != 2 {
				t.Fatalf("PUT override: %d (%s)", r.status, r.body)
			}
			took = append(took, until(t, func() bool {
				return do(t, http.MethodGet, replicas[1].url+"/api/hello", tenant).header.Get("X-RateLimit-Limit") == "2000"
			}))
		}
		slices.Sort(took)
		if took[2] > 100*time.Millisecond {
			t.Errorf("the override held on the other replica after %v, want 100 ms at most", took)
		}
		later := start(t, name, env)
		if h := do(t, http.MethodGet, later.url+"/api/hello", tenant); h.header.Get("X-RateLimit-Limit") != "2000" {
			t.Errorf("a replica started later: X-RateLimit-Limit = %q on its first request, want the override's 2000", h.header.Get("X-RateLimit-Limit"))
		}

		// A reset through one replica, seen by the other.
		tenant = unique("reset")
		for do(t, http.MethodGet, replicas[0].url+"/api/hello", tenant).status != http.StatusTooManyRequests {
		}
		if r := adminAPI(t, replicas[1], http.MethodPost, "tenants/"+tenant+"/reset", map[string]any{"reason": "e2e"}, bearer); r.status/100 != 2 {
			t.Fatalf("POST reset: %d (%s)", r.status, r.body)
		}
		h := do(t, http.MethodGet, replicas[0].url+"/api/hello", tenant)
		for h.failedOpen() {
			h = do(t, http.MethodGet, replicas[0].url+"/api/hello", tenant)
		}
		if h.status != http.StatusOK || h.int(t, "X-RateLimit-Remaining") != 19 {
			t.Errorf("after a reset through the other replica: %d, X-RateLimit-Remaining %s; want 200 and 19", h.status, h.header.Get("X-RateLimit-Remaining"))
		}
	})
}

// until calls cond until it is true, and returns how long after the first
// call the call that found it true was made. It fails the test after 5 s.
func until(t *testing.T, cond func() bool) time.Duration {
	t.Helper()
	began := time.Now()
	for {
		sent := time.Now()
		if cond() {
			return sent.Sub(began)
		}
		if time.Since(began) > 5*time.Second {
			t.Fatal("still not so after 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCLI runs the tollgate command against an app, as its README says:
// TOLLGATE_URL and ADMIN_TOKEN in the environment.
func TestCLI(t *testing.T) {
	if cliErr != nil {
		t.Fatal(cliErr)
	}
	t.Parallel()
	a := start(t, "chi", []string{"ADMIN_TOKEN=" + adminToken})
	tollgate := func(token string, args ...string) (stdout, stderr string, err error) {
		cmd := exec.Command(cli, args...)
		cmd.Env = append(cmd.Environ(), "TOLLGATE_URL="+a.url, "ADMIN_TOKEN="+token)
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err = cmd.Run()
		return out.String(), errOut.String(), err
	}
	tenant := unique("cli")
	if out, errOut, err := tollgate(adminToken, "override", "set", tenant, "growth", "--for", "1h", "--reason", "e2e"); err != nil || !strings.Contains(out, "growth") {
		t.Fatalf("override set: %v, %q %q", err, out, errOut)
	}
	if h := do(t, http.MethodGet, a.url+"/api/hello", tenant); h.header.Get("X-RateLimit-Limit") != "500" {
		t.Errorf("after override set: X-RateLimit-Limit = %q, want growth's 500", h.header.Get("X-RateLimit-Limit"))
	}
	out, errOut, err := tollgate(adminToken, "inspect", tenant)
	if err != nil || !strings.Contains(out, "growth") || !strings.Contains(out, "e2e") {
		t.Errorf("inspect: %v\n%s%s", err, out, errOut)
	}

	flooder := unique("cli-flood")
	flood(t, a, flooder, 30)
	out, errOut, err = tollgate(adminToken, "top", "--json", "--window", "1h")
	var top struct {
		Candidates []struct {
			Tenant            string `json:"tenant"`
			ThrottledRequests int64  `json:"throttled_requests"`
		} `json:"candidates"`
	}
	if err != nil || json.Unmarshal([]byte(out), &top) != nil {
		t.Fatalf("top --json: %v\n%s%s", err, out, errOut)
	}
	if len(top.Candidates) == 0 || top.Candidates[0].Tenant != flooder || top.Candidates[0].ThrottledRequests < 5 {
		t.Errorf("top --json: %s, want %s first", out, flooder)
	}

	for _, tc := range []struct {
		what, token string
		args        []string
	}{
		{"a wrong token", "wrong", []string{"inspect", tenant}},
		{"an unknown plan", adminToken, []string{"override", "set", tenant, "no-such-plan"}},
	} {
		out, errOut, err := tollgate(tc.token, tc.args...)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || !strings.HasPrefix(errOut, "tollgate: ") {
			t.Errorf("%s: %v, stdout %q, stderr %q; want status 1 and a one-line reason", tc.what, err, out, errOut)
		}
	}
	if _, errOut, err := tollgate(adminToken, "override", "clear", tenant); err != nil {
		t.Errorf("override clear: %v %s", err, errOut)
	}
}
