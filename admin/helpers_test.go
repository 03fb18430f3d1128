package admin_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/admin"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/core/redistest"
	"github.com/tollgate-go/tollgate/insights"
)

func TestMain(m *testing.M) { os.Exit(redistest.Run(m)) }

// mountPath is where the tests mount the handler, as the examples do.
const mountPath = "/admin/tollgate"

// The test's credentials.
const (
	token      = "s3cret-admin-token"
	otherToken = "desk-token-2"
)

// newStore returns the store of one replica, its keys under prefix:
// replicas that share a prefix share their tenants and overrides. It is
// Redis, since the memory store keeps no overrides yet; tests that need no
// second replica can move to an in-process store here alone.
func newStore(t testing.TB, prefix string) tollgate.Store {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: redistest.Shared(t)})
	t.Cleanup(func() { client.Close() })
	s, err := redisstore.New(client, redisstore.WithPrefix(prefix), redisstore.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// plans are the example apps' plans: the defaults, and trial with a daily
// quota and a reports budget.
func plans() []tollgate.Plan {
	return append(tollgate.DefaultPlans(), tollgate.Plan{
		Name:  "trial",
		Limit: tollgate.Limit{Rate: 5, Burst: 10},
		Policies: []tollgate.Policy{
			{Quota: tollgate.Quota{Tokens: 30, Period: tollgate.Daily}},
			{Name: "reports", Budget: "reports", Limit: tollgate.Limit{Rate: 1, Burst: 50}},
		},
	})
}

// A replica is one application process: a Limiter and the admin handler
// over it, mounted at mountPath of an httptest server.
type replica struct {
	limiter *tollgate.Limiter
	tracker *insights.Tracker
	admin   http.Handler // mounted at mountPath of srv
	srv     *httptest.Server
	logs    *logs
}

// newReplica starts a replica whose store keeps its keys under prefix;
// edit, if not nil, changes the admin Config before New.
func newReplica(t testing.TB, prefix string, edit func(*admin.Config)) *replica {
	t.Helper()
	resolver, err := tollgate.NewStaticResolver(plans(), "free",
		map[string]string{"acme": "enterprise", "globex": "growth", "initech": "startup", "umbrella": "trial"})
	if err != nil {
		t.Fatal(err)
	}
	tracker, err := insights.New(insights.WithPlans(tollgate.DefaultPlans()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tracker.Close() })
	lg := &logs{}
	l, err := tollgate.New(newStore(t, prefix), resolver, tollgate.WithObserver(tracker), tollgate.WithLogger(slog.New(lg)))
	if err != nil {
		t.Fatal(err)
	}
	cfg := admin.Config{
		Limiter: l,
		Tracker: tracker,
		Tokens:  map[string]string{"admin": token, "desk": otherToken},
		Logger:  slog.New(lg),
	}
	if edit != nil {
		edit(&cfg)
	}
	h, err := admin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(mountPath, http.StripPrefix(mountPath, h))
	mux.Handle(mountPath+"/", http.StripPrefix(mountPath, h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &replica{limiter: l, tracker: tracker, admin: h, srv: srv, logs: lg}
}

// newTestReplica starts a replica on the test's own prefix.
func newTestReplica(t testing.TB, edit func(*admin.Config)) *replica {
	t.Helper()
	return newReplica(t, redistest.Prefix(t), edit)
}

// An answer is an HTTP response, read.
type answer struct {
	status int
	header http.Header
	body   string
}

// json decodes the answer's body into a map.
func (a answer) json(t *testing.T) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(a.body), &v); err != nil {
		t.Fatalf("the answer %d is not JSON: %v\n%s", a.status, err, a.body)
	}
	return v
}

// do sends method to the replica's path (under mountPath) with the body
// and the headers, given in pairs.
func (r *replica) do(t *testing.T, method, path, body string, headers ...string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, r.srv.URL+mountPath+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return send(t, r.srv.Client(), req)
}

func send(t *testing.T, c *http.Client, req *http.Request) answer {
	t.Helper()
	c = &http.Client{Transport: c.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// api sends an API request with the Bearer token.
func (r *replica) api(t *testing.T, method, path, body string) answer {
	t.Helper()
	return r.do(t, method, "/api/"+path, body, "Authorization", "Bearer "+token)
}

// basic returns an Authorization header value for HTTP Basic.
func basic(user, password string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
}

// take spends n requests of tenant through l.
func take(t *testing.T, l *tollgate.Limiter, tenant string, n int) tollgate.Decision {
	t.Helper()
	var d tollgate.Decision
	for range n {
		var err error
		if d, err = l.Take(context.Background(), tollgate.Request{Tenant: tenant}); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// inspect returns the state of tenant as l sees it.
func inspect(t *testing.T, l *tollgate.Limiter, tenant string) tollgate.Decision {
	t.Helper()
	d, err := l.Inspect(context.Background(), tenant)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A clock is a test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// logs is a slog.Handler that keeps every record.
type logs struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *logs) Enabled(context.Context, slog.Level) bool { return true }
func (l *logs) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logs) WithGroup(string) slog.Handler            { return l }
func (l *logs) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r.Clone())
	return nil
}

// find returns the attributes of the records with message msg.
func (l *logs) find(msg string) []map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]string
	for _, r := range l.records {
		if r.Message != msg {
			continue
		}
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value.String()
			return true
		})
		out = append(out, attrs)
	}
	return out
}

// logsLogger returns a logger into the replica's logs.
func (r *replica) logsLogger() *slog.Logger { return slog.New(r.logs) }
