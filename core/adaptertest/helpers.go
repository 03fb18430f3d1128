package adaptertest

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/storetest"
)

// Events records the throttled decisions of a Limiter, denied or denied
// in shadow mode: pass it to tollgate.WithObserver. It is safe for
// concurrent use; the zero Events is empty and ready.
type Events struct {
	mu   sync.Mutex
	list []tollgate.Decision
}

// Observe records a copy of d if it was throttled.
func (ev *Events) Observe(_ context.Context, d *tollgate.Decision) {
	if o := d.Outcome(); o != "denied" && o != "shadow_denied" {
		return
	}
	ev.mu.Lock()
	ev.list = append(ev.list, *d)
	ev.mu.Unlock()
}

// All returns the decisions recorded so far, oldest first.
func (ev *Events) All() []tollgate.Decision {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	return append([]tollgate.Decision(nil), ev.list...)
}

// Last returns the latest decision recorded, failing t if there is none.
func (ev *Events) Last(t *testing.T) tollgate.Decision {
	t.Helper()
	all := ev.All()
	if len(all) == 0 {
		t.Fatal("no throttled decision")
	}
	return all[len(all)-1]
}

// NewLimiter returns a Limiter for an adapter's own tests: the reference
// store (storetest.ModelStore) and the Limiter on one stopped clock
// (returned, to move it), plans for every tenant, no logging, and its
// throttled decisions recorded in the returned Events. opts come after
// those settings and may override them.
func NewLimiter(t *testing.T, plans tollgate.PlanResolver, opts ...tollgate.Option) (*tollgate.Limiter, *Events, *storetest.Clock) {
	t.Helper()
	clock := storetest.NewClock()
	ev := &Events{}
	opts = append([]tollgate.Option{WithClock(clock.Now), tollgate.WithLogger(nil), tollgate.WithObserver(ev)}, opts...)
	l, err := tollgate.New(storetest.NewModelStore(clock.Now), plans, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l, ev, clock
}

// A Response is what Get and Serve return of one request.
type Response struct {
	Status int
	Header http.Header
	Body   string
}

// Get sends one request over real HTTP, with header given as name, value
// pairs, and returns the status and body.
func Get(t *testing.T, method, url string, header ...string) (int, string) {
	t.Helper()
	r := do(t, method, url, header...)
	return r.status, r.body
}

var client = &http.Client{Timeout: 10 * time.Second}

func do(t *testing.T, method, url string, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(body)}
}

// Serve sends one request through h in the test's process, with header
// given as name, value pairs; remoteAddr, if not "", is the client's
// address. It suits the frameworks whose engine is an http.Handler.
func Serve(h http.Handler, method, target, remoteAddr string, header ...string) Response {
	req := httptest.NewRequest(method, target, nil)
	if remoteAddr != "" {
		req.RemoteAddr = remoteAddr
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return Response{Status: w.Code, Header: w.Header(), Body: w.Body.String()}
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

// misconfiguredMsg is the message that adapterkit.LogMisconfiguration
// writes.
const misconfiguredMsg = "rate limiter misconfigured"

// A LogBuffer holds the lines logged through slog's default logger while a
// test runs; see CaptureDefaultLog. It is safe for concurrent use.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was logged so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Count returns how many logged lines contain s.
func (b *LogBuffer) Count(s string) int {
	n := 0
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

// CaptureDefaultLog sends what slog's default logger (and the log
// package's, which it shares) writes to the returned buffer until the test
// ends. It changes process-wide state: tests that use it must not run in
// parallel.
func CaptureDefaultLog(t *testing.T) *LogBuffer {
	t.Helper()
	b := &LogBuffer{}
	old, oldOut, oldFlags := slog.Default(), log.Writer(), log.Flags()
	slog.SetDefault(slog.New(slog.NewTextHandler(b, nil)))
	t.Cleanup(func() {
		slog.SetDefault(old)
		// slog.SetDefault points the log package at the handler it is
		// given, and does not undo that for the original logger.
		log.SetOutput(oldOut)
		log.SetFlags(oldFlags)
	})
	return b
}

// rawStatus sends GET path to base over a connection of its own, with
// header, a "Name: value" line written as it is, however malformed, and
// returns the status of the answer.
func rawStatus(t *testing.T, base, path, header string) int {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: test\r\n"+header+"\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer to a raw request: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
