package tollgatehttp_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/storetest"
	"github.com/tollgate-go/tollgate/core/tollgatehttp"
)

// burstAtOnce sends n requests of tenant at once and returns each one's
// status and how long it took.
func burstAtOnce(t *testing.T, url string, n int) ([]int, []time.Duration) {
	t.Helper()
	statuses, took := make([]int, n), make([]time.Duration, n)
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: n, MaxIdleConnsPerHost: n}}
	defer client.CloseIdleConnections()
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			req.Header.Set(tollgatehttp.DefaultTenantHeader, "t")
			<-start
			began := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			statuses[i], took[i] = resp.StatusCode, time.Since(began)
		}()
	}
	close(start)
	wg.Wait()
	return statuses, took
}

// TestDelayMode holds what fits in 500ms on a free tenant (burst 20 at 2/s)
// and serves it; the rest is denied at once.
func TestDelayMode(t *testing.T) {
	l, err := tollgate.New(storetest.NewModelStore(time.Now), tollgate.SinglePlan(free), tollgate.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{21, 40} {
		t.Run("", func(t *testing.T) {
			l.Reset(t.Context(), "t")
			h := tollgatehttp.Middleware(l, tollgatehttp.WithMaxDelay(500*time.Millisecond, 0))(http.HandlerFunc(ok))
			srv := httptest.NewServer(h)
			defer srv.Close()
			statuses, took := burstAtOnce(t, srv.URL, n)
			var fast, held, denied int
			for i, s := range statuses {
				switch {
				case s == http.StatusOK && took[i] < 300*time.Millisecond:
					fast++
				case s == http.StatusOK && took[i] >= 400*time.Millisecond:
					held++
				case s == http.StatusTooManyRequests && took[i] < 300*time.Millisecond:
					denied++
				default:
					t.Errorf("request %d: %d after %v", i, s, took[i])
				}
			}
			if fast != 20 || held != 1 || denied != n-21 {
				t.Fatalf("%d at once: %d served at once, %d held and served, %d denied at once; want 20, 1, %d", n, fast, held, denied, n-21)
			}
		})
	}
}
