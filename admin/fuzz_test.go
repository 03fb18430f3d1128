package admin_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

// FuzzRequests: whatever a client with valid credentials sends, the
// handler answers with a status it documents, and every refusal in JSON;
// it never panics.
func FuzzRequests(f *testing.F) {
	for _, seed := range []struct{ method, path, ctype, body string }{
		{"GET", "/api/tenants/acme", "", ""},
		{"PUT", "/api/tenants/acme/override", "application/json", `{"plan":"growth","expires_in_seconds":60}`},
		{"PUT", "/api/tenants/a%2Fb/override", "application/json", `{"limits":[{"name":"free","rate":1,"burst":2}]}`},
		{"DELETE", "/api/tenants/acme/override?reason=x", "", ""},
		{"POST", "/api/tenants/acme/reset", "application/json", `{"reason":"x"}`},
		{"GET", "/api/candidates?window=7d&n=3", "", ""},
		{"POST", "/", "application/x-www-form-urlencoded", "action=override&tenant=acme&plan=growth&for=3d"},
		{"GET", "/?tenant=%FF%00&format=json", "", ""},
		{"PUT", "/api/tenants/%E2%80%AE/override", "application/json", `{"plan":"growth","reason":"\u202e"}`},
	} {
		f.Add(seed.method, seed.path, seed.ctype, seed.body)
	}
	r := newTestReplica(f, nil)
	f.Fuzz(func(t *testing.T, method, path, ctype, body string) {
		req, err := http.NewRequest(method, "http://admin.test"+path, strings.NewReader(body))
		if err != nil || !strings.HasPrefix(req.URL.Path, "/") {
			return
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", ctype)
		w := httptest.NewRecorder()
		start := time.Now()
		r.admin.ServeHTTP(w, req)
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("%s %s %q: answered in %v", method, path, body, took)
		}
		documented := []int{200, 303, 400, 403, 404, 405, 415, 501}
		if !slices.Contains(documented, w.Code) {
			t.Fatalf("%s %s %q: %d %s", method, path, body, w.Code, w.Body)
		}
		if w.Code >= 400 && w.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("%s %s %q: %d in %s", method, path, body, w.Code, w.Header().Get("Content-Type"))
		}
	})
}
