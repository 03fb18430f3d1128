package e2e

import (
	"encoding/json"
	"net/http"
	"reflect"
	"testing"

	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/examples/internal/demo"
	"github.com/tollgate-go/tollgate/examples/internal/launch"
	"github.com/tollgate-go/tollgate/insights/redisexchange"
	"github.com/tollgate-go/tollgate/internal/testredis"
)

const adminToken = "e2e-admin-token"

// admin fetches the upgrade candidates of the last hour as JSON, with the
// admin token.
func admin(t *testing.T, c *http.Client, app *launch.App) []map[string]any {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, app.URL+demo.AdminPath+"?window=1h&n=200&format=json", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s with the token: %d", demo.AdminPath, resp.StatusCode)
	}
	var rep struct {
		Candidates []map[string]any `json:"candidates"`
		FleetError string           `json:"fleet_error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		t.Fatal(err)
	}
	if rep.FleetError != "" {
		t.Fatalf("fleet error: %s", rep.FleetError)
	}
	return rep.Candidates
}

// candidate returns tenant's entry among cs, or fails.
func candidate(t *testing.T, cs []map[string]any, tenant string) map[string]any {
	t.Helper()
	for _, c := range cs {
		if c["tenant"] == tenant {
			return c
		}
	}
	t.Fatalf("%s is not among the %d candidates", tenant, len(cs))
	return nil
}

// flood sends n requests of tenant to app and counts the statuses.
func flood(t *testing.T, c *http.Client, app *launch.App, tenant string, n int) map[int]int {
	t.Helper()
	got := map[int]int{}
	for range n {
		got[do(t, c, http.MethodGet, app.URL+"/api/hello", tenant).status]++
	}
	return got
}

// TestAdminPage: with ADMIN_TOKEN, every app serves the upgrade candidates
// at /admin/tollgate to the token only; without it, there is no page.
func TestAdminPage(t *testing.T) {
	for _, fw := range launch.Frameworks {
		t.Run(fw, func(t *testing.T) {
			t.Parallel()
			c := newClient()
			off := start(t, fw)
			if r := do(t, c, http.MethodGet, off.URL+demo.AdminPath, ""); r.status != http.StatusNotFound {
				t.Fatalf("without ADMIN_TOKEN: %d, want 404", r.status)
			}

			app := start(t, fw, "ADMIN_TOKEN="+adminToken)
			for _, auth := range []string{"", "Bearer wrong", "Basic " + adminToken, adminToken} {
				req, _ := http.NewRequest(http.MethodGet, app.URL+demo.AdminPath, nil)
				if auth != "" {
					req.Header.Set("Authorization", auth)
				}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
					t.Fatalf("Authorization %q: %d, want 401 with WWW-Authenticate", auth, resp.StatusCode)
				}
			}

			tenant := unique("admin-" + fw)
			got := flood(t, c, app, tenant, 30)
			if got[http.StatusTooManyRequests] < 5 {
				t.Fatalf("the flood got %v", got)
			}
			cand := candidate(t, admin(t, c, app), tenant)
			if cand["plan"] != "free" || cand["throttled_requests"] != float64(got[http.StatusTooManyRequests]) ||
				cand["requests"] != float64(30) || cand["suggested_plan"] != "startup" {
				t.Fatalf("%s after %v: %v", tenant, got, cand)
			}

			req, _ := http.NewRequest(http.MethodGet, app.URL+demo.AdminPath, nil)
			req.Header.Set("Authorization", "Bearer "+adminToken)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
				t.Fatalf("the page: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
		})
	}
}

// TestShadowMode: with SHADOW=1 every app answers a flood that would get
// 429s with 200s, and the page shows the shadow denials.
func TestShadowMode(t *testing.T) {
	for _, fw := range launch.Frameworks {
		t.Run(fw, func(t *testing.T) {
			t.Parallel()
			c := newClient()
			app := start(t, fw, "SHADOW=1", "ADMIN_TOKEN="+adminToken)
			tenant := unique("shadow-" + fw)
			got := flood(t, c, app, tenant, 40)
			if got[http.StatusOK] != 40 {
				t.Fatalf("in shadow mode the flood got %v, want 40 × 200", got)
			}
			cand := candidate(t, admin(t, c, app), tenant)
			shadow, _ := cand["shadow_denied_requests"].(float64)
			if shadow < 15 || cand["throttled_requests"] != shadow {
				t.Fatalf("%s: %v shadow-denied of %v throttled, want at least 15, all of them", tenant, cand["shadow_denied_requests"], cand["throttled_requests"])
			}
		})
	}
}

// TestReplicasShowTheSameCandidates: two replicas of each app on one
// Redis, a flood sent to one of them only; both list the same candidates,
// the flooding tenant among them with every throttled request.
func TestReplicasShowTheSameCandidates(t *testing.T) {
	// The apps share their candidates under the exchange's default
	// prefix, and their stores keep an epoch key: those go once every app
	// has stopped (and published one last time).
	addr := testredis.Shared(t)
	t.Cleanup(func() {
		for _, prefix := range []string{redisexchange.DefaultPrefix, redisstore.DefaultPrefix + "{#epoch}"} {
			if _, err := testredis.DeleteKeys(addr, prefix); err != nil {
				t.Error(err)
			}
		}
	})
	for _, fw := range launch.Frameworks {
		t.Run(fw, func(t *testing.T) {
			tenant := unique("fleet-" + fw)
			url := redisURL(t, tenant)
			pingRedis(t, url)
			a := start(t, fw, "REDIS_URL="+url, "ADMIN_TOKEN="+adminToken)
			b := start(t, fw, "REDIS_URL="+url, "ADMIN_TOKEN="+adminToken)
			c := newClient()
			got := flood(t, c, a, tenant, 40)
			if got[http.StatusTooManyRequests] < 10 {
				t.Fatalf("the flood got %v", got)
			}
			admin(t, c, a)          // a publishes its counts
			fromB := admin(t, c, b) // b publishes its own and reads both
			fromA := admin(t, c, a) // and a, both
			if !reflect.DeepEqual(fromA, fromB) {
				t.Fatalf("the replicas disagree:\n a %v\n b %v", fromA, fromB)
			}
			cand := candidate(t, fromB, tenant)
			if cand["throttled_requests"] != float64(got[http.StatusTooManyRequests]) || cand["plan"] != "free" {
				t.Fatalf("b, which the flood never reached, shows %v after %v", cand, got)
			}
		})
	}
}
