package demo

import (
	"bytes"
	"context"
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
	for tenant, want := range map[string]tollgate.Plan{
		"acme":    tollgate.Enterprise,
		"globex":  tollgate.Growth,
		"initech": tollgate.Startup,
		"hooli":   tollgate.Free,
		"":        tollgate.Free,
	} {
		if got, err := PlanOf(tenant); err != nil || got != want {
			t.Errorf("PlanOf(%q) = %v, %v; want %v", tenant, got, err, want)
		}
	}
}

func TestBudget(t *testing.T) {
	if got := Budget(tollgate.Startup, 5*time.Second); got != 150 {
		t.Errorf("startup over 5s: %v, want 100 + 10 x 5", got)
	}
}

func TestNewLimiterRejectsABadRedisURL(t *testing.T) {
	_, _, err := NewLimiter(context.Background(), Config{RedisURL: "http://user:secret@example.com"}, slog.New(slog.DiscardHandler))
	if err == nil {
		t.Fatal("no error for an http:// REDIS_URL")
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("the error %q shows the password", err)
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
	l, closeStore, err := NewLimiter(context.Background(), Config{RedisURL: url}, slog.New(slog.NewJSONHandler(logs, nil)))
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
