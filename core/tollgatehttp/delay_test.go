package tollgatehttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/storetest"
	"github.com/tollgate-go/tollgate/core/tollgatehttp"
)

// The delay mode's figures on 21 and 40 requests at once are the
// conformance kit's (adaptertest, GET /held), which every adapter runs.
// These tests are of what the HTTP layer does once for all of them.

// tenPerSecond is a bucket of 1 that refills every 100ms.
var tenPerSecond = tollgate.Plan{Name: "ten", Limit: tollgate.Limit{Rate: 10, Burst: 1}}

func newRealLimiter(t *testing.T, plan tollgate.Plan) *tollgate.Limiter {
	t.Helper()
	l, err := tollgate.New(storetest.NewModelStore(time.Now), tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// burstAtOnce sends n requests of tenant "t" at once and returns each
// one's status and when it was answered, since the burst began.
func burstAtOnce(t *testing.T, url string, n int) ([]int, []time.Duration) {
	t.Helper()
	statuses, took := make([]int, n), make([]time.Duration, n)
	var began time.Time // set before any request goes
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: n, MaxIdleConnsPerHost: n}}
	defer client.CloseIdleConnections()
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			req.Header.Set(tollgatehttp.DefaultTenantHeader, "t")
			<-start
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			statuses[i], took[i] = resp.StatusCode, time.Since(began)
		})
	}
	began = time.Now()
	close(start)
	wg.Wait()
	return statuses, took
}

// TestDelayModeMaxHeld: with room for 6 requests within the delay but at
// most 2 held at once, a request that takes the only token and then 5 at
// once get 1 answer at once, 2 after their wait, and 3 refusals at once,
// though their tokens would fit. The first goes alone because a request
// counts against the bound while it is decided too: in a burst of 6, the
// one served at once may still be counted when the others arrive.
func TestDelayModeMaxHeld(t *testing.T) {
	twoPerSecond := tollgate.Plan{Name: "two", Limit: tollgate.Limit{Rate: 2, Burst: 1}} // a token every 500ms
	l := newRealLimiter(t, twoPerSecond)
	h := tollgatehttp.Middleware(l, tollgatehttp.WithMaxDelay(3*time.Second, 2))(http.HandlerFunc(ok))
	srv := httptest.NewServer(h)
	defer srv.Close()
	first, firstTook := burstAtOnce(t, srv.URL, 1)
	statuses, took := burstAtOnce(t, srv.URL, 5)
	statuses, took = append(first, statuses...), append(firstTook, took...)
	var fast, held, denied int
	for i, s := range statuses {
		switch {
		// The held requests' tokens are due 500ms and 1s after the
		// first request was decided, which was just before the five
		// began: each waits well over 300ms.
		case s == http.StatusOK && took[i] < 300*time.Millisecond:
			fast++
		case s == http.StatusOK && took[i] >= 300*time.Millisecond:
			held++
		case s == http.StatusTooManyRequests && took[i] < 300*time.Millisecond:
			denied++
		default:
			t.Errorf("request %d: %d after %v", i, s, took[i])
		}
	}
	if fast != 1 || held != 2 || denied != 3 {
		t.Fatalf("1, then 5 at once, at most 2 held: %d served at once, %d held, %d denied; want 1, 2 and 3", fast, held, denied)
	}
}

// TestDelayModeClientGone: a held request whose client goes away gives its
// token back, and the handler never runs.
func TestDelayModeClientGone(t *testing.T) {
	slow := tollgate.Plan{Name: "slow", Limit: tollgate.Limit{Rate: 2, Burst: 1}} // a token every 500ms
	l := newRealLimiter(t, slow)
	served := make(chan struct{}, 2)
	h := tollgatehttp.Middleware(l, tollgatehttp.WithMaxDelay(time.Second, 0))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served <- struct{}{}
		ok(w, r)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		req.Header.Set(tollgatehttp.DefaultTenantHeader, "t")
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	<-served
	start := time.Now()
	if err := get(100 * time.Millisecond); err == nil {
		t.Fatal("a request held 500ms answered within 100ms")
	}
	// The server sees the client go and gives the token back.
	deadline := time.Now().Add(2 * time.Second)
	for {
		d, err := l.Inspect(context.Background(), "t")
		if err != nil {
			t.Fatal(err)
		}
		// Had the held request kept its token, the bucket would be
		// full a second after the first request, not half a second.
		if until := d.ResetAfter + time.Since(start); until < 700*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bucket is full in %v: the held request whose client left kept its token", d.ResetAfter)
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-served:
		t.Fatal("the handler ran for a request whose client left while it was held")
	case <-time.After(600 * time.Millisecond):
	}
}

// TestDelayModeDeadline: a request whose context ends before its slot is
// not held to fail: it is refused at once, having taken nothing.
func TestDelayModeDeadline(t *testing.T) {
	l := newRealLimiter(t, tenPerSecond)
	h := tollgatehttp.Middleware(l, tollgatehttp.WithMaxDelay(time.Second, 0))(http.HandlerFunc(ok))
	// A deadline of 50ms on the request, as a gateway or the gRPC layer
	// sets one.
	bounded := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 50*time.Millisecond)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
	serve := func() (int, time.Duration) {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set(tollgatehttp.DefaultTenantHeader, "t")
		w := httptest.NewRecorder()
		began := time.Now()
		bounded.ServeHTTP(w, req)
		return w.Code, time.Since(began)
	}
	if code, _ := serve(); code != http.StatusOK {
		t.Fatalf("first request: %d", code)
	}
	if code, took := serve(); code != http.StatusTooManyRequests || took > 40*time.Millisecond {
		t.Fatalf("a request whose slot is past its deadline: %d after %v, want 429 at once", code, took)
	}
	d, err := l.Inspect(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	if d.ResetAfter > 100*time.Millisecond {
		t.Fatalf("the bucket is full in %v: the refused request took a token", d.ResetAfter)
	}
}
