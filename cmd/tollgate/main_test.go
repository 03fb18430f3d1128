package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// fakeAPI records the requests it gets and answers each with status and
// body.
type fakeAPI struct {
	status int
	body   string
	got    []*http.Request
	bodies []string
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.got = append(f.got, r)
	f.bodies = append(f.bodies, string(b))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(f.status)
	io.WriteString(w, f.body)
}

func runWith(t *testing.T, api *fakeAPI, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	getenv := func(k string) string {
		if v, ok := env[k]; ok {
			return strings.ReplaceAll(v, "$SERVER", srv.URL)
		}
		return map[string]string{"TOLLGATE_URL": srv.URL, "ADMIN_TOKEN": "s3cret"}[k]
	}
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, getenv, &out, &errOut, srv.Client())
	return code, out.String(), errOut.String()
}

func TestRequestsFollowTheAPI(t *testing.T) {
	cases := []struct {
		args   []string
		method string
		path   string
		query  string
		body   map[string]any
	}{
		{[]string{"inspect", "acme"}, "GET", "/admin/tollgate/api/tenants/acme", "", nil},
		{[]string{"inspect", "a/b c"}, "GET", "/admin/tollgate/api/tenants/a%2Fb%20c", "", nil},
		{[]string{"reset", "acme", "--reason", "throttled by mistake"}, "POST", "/admin/tollgate/api/tenants/acme/reset", "",
			map[string]any{"reason": "throttled by mistake"}},
		{[]string{"override", "set", "acme", "growth", "--for", "48h", "--reason", "weekend"}, "PUT", "/admin/tollgate/api/tenants/acme/override", "",
			map[string]any{"plan": "growth", "expires_in_seconds": 172800.0, "reason": "weekend"}},
		{[]string{"--json", "override", "set", "acme", "growth"}, "PUT", "/admin/tollgate/api/tenants/acme/override", "",
			map[string]any{"plan": "growth", "reason": ""}},
		{[]string{"override", "clear", "acme", "--reason", "done"}, "DELETE", "/admin/tollgate/api/tenants/acme/override", "reason=done", nil},
		{[]string{"override", "list"}, "GET", "/admin/tollgate/api/overrides", "", nil},
		{[]string{"top", "--window", "1h", "--n", "5"}, "GET", "/admin/tollgate/api/candidates", "n=5&window=1h", nil},
	}
	for _, c := range cases {
		api := &fakeAPI{status: 200, body: `{}`}
		code, _, stderr := runWith(t, api, nil, c.args...)
		if code != 0 || len(api.got) != 1 {
			t.Errorf("%v: exit %d, %d requests, stderr %q", c.args, code, len(api.got), stderr)
			continue
		}
		r := api.got[0]
		if r.Method != c.method || r.URL.EscapedPath() != c.path || r.URL.RawQuery != c.query {
			t.Errorf("%v: %s %s?%s, want %s %s?%s", c.args, r.Method, r.URL.EscapedPath(), r.URL.RawQuery, c.method, c.path, c.query)
		}
		if got := r.Header.Get("Authorization"); got != "Bearer s3cret" {
			t.Errorf("%v: Authorization %q", c.args, got)
		}
		if c.body != nil {
			var got map[string]any
			if err := json.Unmarshal([]byte(api.bodies[0]), &got); err != nil {
				t.Errorf("%v: body %q: %v", c.args, api.bodies[0], err)
			} else if !equalJSON(got, c.body) {
				t.Errorf("%v: body %v, want %v", c.args, got, c.body)
			}
		}
	}
}

func equalJSON(a, b map[string]any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func TestFailuresAreOneLineAndNonZero(t *testing.T) {
	cases := []struct {
		name string
		api  *fakeAPI
		env  map[string]string
		args []string
		code int
		want string
	}{
		{"no url", &fakeAPI{status: 200}, map[string]string{"TOLLGATE_URL": ""}, []string{"inspect", "acme"}, 1, "TOLLGATE_URL is not set"},
		{"no token", &fakeAPI{status: 200}, map[string]string{"ADMIN_TOKEN": ""}, []string{"inspect", "acme"}, 1, "ADMIN_TOKEN is not set"},
		{"bad url", &fakeAPI{status: 200}, map[string]string{"TOLLGATE_URL": "ftp://x"}, []string{"inspect", "acme"}, 1, "not an http or https URL"},
		{"unknown plan", &fakeAPI{status: 400, body: `{"error":"unknown plan \"platinum\"\nsecond line"}`}, nil,
			[]string{"override", "set", "acme", "platinum"}, 1, `400 Bad Request: unknown plan "platinum"`},
		{"wrong token", &fakeAPI{status: 401, body: `{"error":"unauthorized"}`}, nil, []string{"override", "list"}, 1, "401 Unauthorized: unauthorized"},
		{"not json", &fakeAPI{status: 200, body: `<html>`}, nil, []string{"inspect", "acme"}, 1, "not the API's JSON"},
		{"refused", &fakeAPI{status: 200}, map[string]string{"TOLLGATE_URL": "http://127.0.0.1:1"}, []string{"inspect", "acme"}, 1, "connection refused"},
		{"usage", &fakeAPI{status: 200}, nil, []string{"override", "set", "acme"}, 2, "wrong number of arguments"},
		{"bad duration", &fakeAPI{status: 200}, nil, []string{"override", "set", "acme", "growth", "--for", "soon"}, 2, "not a positive duration"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := runWith(t, c.api, c.env, c.args...)
			if code != c.code || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr, c.code, c.want)
			}
			if first := strings.SplitN(stderr, "\n", 2)[0]; !strings.HasPrefix(first, "tollgate: ") {
				t.Fatalf("the reason is not on the first line: %q", stderr)
			}
			if c.code == 1 && strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
				t.Fatalf("a failure took more than one line: %q", stderr)
			}
		})
	}
}

func TestHumanAndJSONOutput(t *testing.T) {
	state := `{"tenant":"acme","plan":"growth","override":{"plan":"growth","expires_at":"2026-12-06T00:00:00Z","reason":"weekend"},` +
		`"policies":[{"name":"growth","limit":500,"remaining":499,"reset_seconds":1}]}`
	_, out, _ := runWith(t, &fakeAPI{status: 200, body: state}, nil, "inspect", "acme")
	for _, want := range []string{"tenant", "acme", "growth", "weekend", "499"} {
		if !strings.Contains(out, want) {
			t.Errorf("human output lacks %q:\n%s", want, out)
		}
	}
	_, out, _ = runWith(t, &fakeAPI{status: 200, body: state}, nil, "--json", "inspect", "acme")
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil || v["plan"] != "growth" {
		t.Errorf("--json output %q: %v", out, err)
	}
}

// TestTopReadsTheCandidates: top shows the candidates of the admin API's
// GET candidates, the insights Report, in its ranking.
func TestTopReadsTheCandidates(t *testing.T) {
	report := `{"window":"1h","candidates":[` +
		`{"tenant":"initech","plan":"startup","requests":130,"throttled_requests":4,"throttled_tokens":40},` +
		`{"tenant":"hooli","plan":"free","requests":40,"throttled_requests":20,"throttled_tokens":20}]}`
	code, out, stderr := runWith(t, &fakeAPI{status: 200, body: report}, nil, "top", "--window", "1h")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[1]), " ") != "initech startup 40 4 130" ||
		strings.Join(strings.Fields(lines[2]), " ") != "hooli free 20 20 40" {
		t.Fatalf("top printed:\n%s", out)
	}
}
