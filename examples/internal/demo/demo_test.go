package demo

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
)

func TestConfigFromEnv(t *testing.T) {
	t.Setenv("ADDR", "")
	t.Setenv("REDIS_URL", "")
	if c := ConfigFromEnv(); c.Addr != ":8080" || c.RedisURL != "" {
		t.Errorf("defaults: %+v, want :8080 and the memory store", c)
	}
	t.Setenv("ADDR", "127.0.0.1:9999")
	t.Setenv("REDIS_URL", "redis://127.0.0.1:6379/3")
	if c := ConfigFromEnv(); c.Addr != "127.0.0.1:9999" || c.RedisURL != "redis://127.0.0.1:6379/3" {
		t.Errorf("from the environment: %+v", c)
	}
}

func TestPlanOf(t *testing.T) {
	for tenant, want := range map[string]struct {
		plan  string
		burst int64
		rate  float64
		daily int64 // the daily quota, if any
	}{
		"acme":     {"enterprise", 2000, 200, 0},
		"globex":   {"growth", 500, 50, 0},
		"initech":  {"startup", 100, 10, 0},
		"umbrella": {"trial", 10, 5, 30},
		"hooli":    {"free", 20, 2, 0},
		"":         {"free", 20, 2, 0},
	} {
		p, err := PlanOf(tenant)
		if err != nil || p.Name != want.plan || p.Limit != (tollgate.Limit{Rate: want.rate, Burst: want.burst}) {
			t.Errorf("PlanOf(%q) = %v %v, %v; want %s with %d burst at %g/s", tenant, p.Name, p.Limit, err, want.plan, want.burst, want.rate)
			continue
		}
		var daily int64
		var budget tollgate.Limit
		for _, pol := range p.Policies {
			switch {
			case pol.Budget == ReportsBudget:
				budget = pol.Limit
			case pol.Quota.Period == tollgate.Daily && pol.Budget == "":
				daily = pol.Quota.Tokens
			default:
				t.Errorf("%s: unexpected policy %+v", p.Name, pol)
			}
		}
		if daily != want.daily {
			t.Errorf("%s: daily quota %d, want %d", p.Name, daily, want.daily)
		}
		if budget != (tollgate.Limit{Rate: 50.0 / 3600, Burst: 50}) {
			t.Errorf("%s: reports budget %v, want 50 tokens an hour", p.Name, budget)
		}
		// Five reports an hour fit the budget exactly.
		if err := budget.CheckCost(ReportCost); err != nil || budget.Burst/ReportCost != 5 {
			t.Errorf("%s: the reports budget takes %d reports (%v), want 5", p.Name, budget.Burst/ReportCost, err)
		}
	}
}

func TestBudget(t *testing.T) {
	startup, err := PlanOf("initech")
	if err != nil {
		t.Fatal(err)
	}
	if got := Budget(startup, 5*time.Second); got != 150 {
		t.Errorf("startup over 5s: %v, want 100 + 10 x 5", got)
	}
}

// TestParseRedisURLHidesCredentials: whatever is wrong with REDIS_URL, the
// error names the part at fault and never the user or the password.
func TestParseRedisURLHidesCredentials(t *testing.T) {
	for _, tc := range []struct {
		url     string
		secrets []string
		names   string // what the error must name
	}{
		{"redis://user:pw-1x@host:notaport/0", []string{"pw-1x", "user"}, `":notaport"`},
		{"http://admin:s3cret@example.com", []string{"s3cret", "admin"}, "scheme"},
		{"redis://:hunter2@127.0.0.1:6379/notadb", []string{"hunter2"}, "notadb"},
		{"redis://bob:p%zzw@127.0.0.1:6379/0", []string{"p%zzw", "%zz", "bob"}, "user or password"},
		{"redis://bob:p@ss@127.0.0.1:6379/0?dial_timeout=soon", []string{"p@ss", "bob"}, "soon"},
		{"bob:pw9@127.0.0.1:6379", []string{"pw9", "bob"}, "scheme"},
	} {
		_, err := ParseRedisURL(tc.url)
		if err == nil {
			t.Errorf("%s: no error", tc.url)
			continue
		}
		msg := err.Error()
		for _, s := range tc.secrets {
			if strings.Contains(msg, s) {
				t.Errorf("%s: the error %q shows %q", tc.url, msg, s)
			}
		}
		if !strings.Contains(msg, tc.names) {
			t.Errorf("%s: the error %q does not name %s", tc.url, msg, tc.names)
		}
	}
	opts, err := ParseRedisURL("redis://bob:p%40ss@127.0.0.1:6380/3")
	if err != nil || opts.Username != "bob" || opts.Password != "p@ss" || opts.Addr != "127.0.0.1:6380" || opts.DB != 3 {
		t.Errorf("a valid URL: %+v, %v", opts, err)
	}
}

// TestNewLimiterHidesCredentials: the error that an app logs when it
// exits does not show the password either.
func TestNewLimiterHidesCredentials(t *testing.T) {
	_, _, _, _, err := NewLimiter(context.Background(), Config{RedisURL: "redis://user:secret@host:notaport/0"}, slog.New(slog.DiscardHandler))
	if err == nil {
		t.Fatal("no error for a bad port")
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("the error %q shows the password", err)
	}
}

// TestEveryPolicyApplies: on the memory store, the apps' default, a
// trial tenant's report meets the plan's bucket, its daily quota and the
// reports budget, and takes from each.
func TestEveryPolicyApplies(t *testing.T) {
	l, _, _, closeStore, err := NewLimiter(context.Background(), Config{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	d, err := l.Take(context.Background(), tollgate.Request{Tenant: "umbrella", Budget: ReportsBudget, Cost: ReportCost})
	if err != nil || !d.Allowed {
		t.Fatalf("a trial report: %+v, %v; want allowed", d, err)
	}
	var got []string
	for i, p := range d.Policies() {
		got = append(got, fmt.Sprintf("%s:%d", p.Name, d.Results()[i].Remaining))
	}
	// 10 of the burst of 10, of the 30 a day, of the 50 report tokens.
	if want := "trial:0 trial-daily:20 trial-reports:40"; strings.Join(got, " ") != want {
		t.Errorf("policies and tokens left %v, want %s", got, want)
	}
}

func TestNewLimiterStartsWithRedisDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "redis://" + ln.Addr().String() + "/0"
	ln.Close()
	// go-redis goes on dialling, and logging, in goroutines of its own.
	logs := &lockedBuffer{}
	l, _, _, closeStore, err := NewLimiter(context.Background(), Config{RedisURL: url}, slog.New(slog.NewJSONHandler(logs, nil)))
	if err != nil {
		t.Fatalf("NewLimiter with Redis down: %v; want a limiter that fails open", err)
	}
	defer closeStore()
	if !strings.Contains(logs.String(), `"level":"WARN","msg":"redis does not answer`) {
		t.Errorf("no warning logged:\n%s", logs.String())
	}
	d, err := l.Take(context.Background(), tollgate.Request{Tenant: "hooli"})
	if err != nil || !d.Allowed || d.HasFigures() {
		t.Errorf("Take with Redis down: %+v, %v; want allowed, without figures", d, err)
	}
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
