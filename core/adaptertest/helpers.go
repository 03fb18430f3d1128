package adaptertest

import (
	"context"
	"io"
	"net/http"
	"sync"
	"testing"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/storetest"
)

// Events records the throttle events a Limiter reports. It is safe for
// concurrent use; the zero Events is empty and ready.
type Events struct {
	mu   sync.Mutex
	list []tollgate.ThrottleEvent
}

// Record adds e; pass it to tollgate.WithOnThrottle.
func (ev *Events) Record(_ context.Context, e tollgate.ThrottleEvent) {
	ev.mu.Lock()
	ev.list = append(ev.list, e)
	ev.mu.Unlock()
}

// All returns the events recorded so far, oldest first.
func (ev *Events) All() []tollgate.ThrottleEvent {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	return append([]tollgate.ThrottleEvent(nil), ev.list...)
}

// Last returns the latest event, failing t if there is none.
func (ev *Events) Last(t *testing.T) tollgate.ThrottleEvent {
	t.Helper()
	all := ev.All()
	if len(all) == 0 {
		t.Fatal("no throttle event")
	}
	return all[len(all)-1]
}

// NewLimiter returns a Limiter for an adapter's own tests: a memory store and
// the Limiter on one stopped clock (returned, to move it), plans for every
// tenant, no logging, and its throttle events recorded in the returned
// Events. opts come after those settings and may override them.
func NewLimiter(t *testing.T, plans tollgate.PlanResolver, opts ...tollgate.Option) (*tollgate.Limiter, *Events, *storetest.Clock) {
	t.Helper()
	clock := storetest.NewClock()
	store := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0))
	ev := &Events{}
	opts = append([]tollgate.Option{WithClock(clock.Now), tollgate.WithLogger(nil), tollgate.WithOnThrottle(ev.Record)}, opts...)
	l, err := tollgate.New(store, plans, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l, ev, clock
}

// Get sends one request over real HTTP, with header given as name, value
// pairs, and returns the status and body.
func Get(t *testing.T, method, url string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// Drain makes burst+1 requests with Get and checks that only the last is
// denied.
func Drain(t *testing.T, burst int, method, url string, header ...string) {
	t.Helper()
	for i := 0; i <= burst; i++ {
		status, body := Get(t, method, url, header...)
		want := http.StatusOK
		if i == burst {
			want = http.StatusTooManyRequests
		}
		if status != want {
			t.Fatalf("%s %s request %d: status %d, want %d (body %q)", method, url, i+1, status, want, body)
		}
	}
}
