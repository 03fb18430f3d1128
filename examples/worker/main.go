// Command worker runs background jobs that share their tenants' budgets,
// with the API and with every other worker on the same Redis, through
// Limiter.Wait: before each job it waits for the tenant's turn instead of
// trying and backing off on refusals. Turns are handed out in order of
// arrival across every process, so a tenant's jobs run at its plan's rate
// however many workers want them, and the other tenants do not wait behind
// it.
//
//	REDIS_URL=redis://127.0.0.1:6379/0 go run ./examples/worker
//	REDIS_URL=redis://127.0.0.1:6379/0 ADDR=:8081 go run ./examples/worker  # a second worker
//
// initech (startup: a burst of 100, then 10 a second) has a backlog that 16
// goroutines take job after job; acme, globex and hooli send 40, 20 and 1
// jobs a second, within their plans. Every 5 seconds, and at the end, the
// worker logs each tenant's jobs and their longest wait for a turn.
//
// Environment: ADDR (where it serves GET /healthz, GET /metrics and the
// admin page; default :8080, port 0 picks a free one), REDIS_URL (unset:
// limits in this process only), ADMIN_TOKEN (set: the operator's page and
// API under /admin/tollgate), SHADOW=1 (decide and record, never wait).
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/tollgate-go/tollgate/admin"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/insights"
	tollgateprom "github.com/tollgate-go/tollgate/prometheus"
)

// loads are the jobs of each tenant, on its plan: a backlog (perSecond 0),
// or a steady number a second.
var loads = []struct {
	tenant, plan string
	perSecond    float64
}{{"initech", "startup", 0}, {"acme", "enterprise", 40}, {"globex", "growth", 20}, {"hooli", "free", 1}}

func main() {
	duration := flag.Duration("duration", 30*time.Second, "how long the worker takes jobs; 0: until interrupted")
	flag.Parse()
	logger := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, logger, *duration)
	stop()
	if err != nil {
		logger.Error("exiting", slog.String("error", err.Error()))
		os.Exit(1)
	}
}

func run(ctx context.Context, logger *slog.Logger, duration time.Duration) error {
	store, closeStore, err := newStore()
	if err != nil {
		return err
	}
	defer closeStore()
	limiter, tracker, err := newLimiter(store, logger)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(`{"status":"ok"}`)) })
	mux.Handle("GET /metrics", promhttp.Handler())
	if token := os.Getenv("ADMIN_TOKEN"); token != "" {
		h, err := admin.New(admin.Config{Limiter: limiter, Tracker: tracker, Tokens: map[string]string{"admin": token}})
		if err != nil {
			return err
		}
		mux.Handle("/admin/tollgate", http.StripPrefix("/admin/tollgate", h))
		mux.Handle("/admin/tollgate/", http.StripPrefix("/admin/tollgate", h))
	}
	ln, err := net.Listen("tcp", cmp.Or(os.Getenv("ADDR"), ":8080"))
	if err != nil {
		return err
	}
	logger.Info("listening", slog.String("addr", ln.Addr().String()))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }() // http.ErrServerClosed, once closed
	defer srv.Close()

	if duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, duration)
		defer cancel()
	}
	began := time.Now()
	tallies := make([]tally, len(loads))
	var wg sync.WaitGroup
	for i, load := range loads {
		t := &tallies[i]
		if load.perSecond == 0 {
			for range 16 {
				wg.Go(func() {
					for job(ctx, limiter, load.tenant, t) {
					}
				})
			}
			continue
		}
		wg.Go(func() {
			tick := time.NewTicker(time.Duration(float64(time.Second) / load.perSecond))
			defer tick.Stop()
			for ctx.Err() == nil {
				select {
				case <-ctx.Done():
				case <-tick.C:
					wg.Go(func() { job(ctx, limiter, load.tenant, t) })
				}
			}
		})
	}
	progress := time.NewTicker(5 * time.Second)
	defer progress.Stop()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for msg := "jobs so far"; ; {
		select {
		case <-progress.C:
		case <-done:
			msg = "jobs done"
		}
		for i, load := range loads {
			tallies[i].log(logger, msg, load.tenant, load.plan, time.Since(began))
		}
		if msg == "jobs done" {
			return nil
		}
	}
}

// job waits for tenant's turn, then does the job. It reports false when
// the run is over.
func job(ctx context.Context, limiter *tollgate.Limiter, tenant string, t *tally) bool {
	ready := time.Now()
	for {
		d, err := limiter.Wait(ctx, tollgate.Request{Tenant: tenant, Method: "JOB", Route: "sync"})
		switch {
		case err == nil:
			t.add(time.Since(ready), d.Delay > 0)
			time.Sleep(10 * time.Millisecond) // the job itself
			return true
		case ctx.Err() != nil || errors.Is(err, tollgate.ErrWaitExceedsDeadline):
			return false // the run is over, or will be before the turn comes
		}
		// The store failed, and under fail-closed the job waits rather
		// than run unlimited: try again shortly.
		t.mu.Lock()
		t.failures++
		t.mu.Unlock()
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// A tally counts one tenant's jobs.
type tally struct {
	mu       sync.Mutex
	jobs     int
	delayed  int           // jobs that waited for a later turn
	maxWait  time.Duration // from ready to started
	failures int           // Waits that failed on the store
}

func (t *tally) add(wait time.Duration, delayed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.jobs++
	if delayed {
		t.delayed++
	}
	t.maxWait = max(t.maxWait, wait)
}

func (t *tally) log(logger *slog.Logger, msg, tenant, plan string, elapsed time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	logger.Info(msg, slog.String("tenant", tenant), slog.String("plan", plan),
		slog.Int("jobs", t.jobs), slog.Float64("jobs_per_second", float64(t.jobs)/elapsed.Seconds()),
		slog.Int("delayed", t.delayed), slog.Int64("max_wait_ms", t.maxWait.Milliseconds()), slog.Int("store_failures", t.failures))
}

// newLimiter returns the worker's Limiter on store, with its metrics
// registered for /metrics, and the tracker of the tenants that hit their
// limits, for the operator's page. Unlike an API, a worker is in no hurry:
// when the store fails, its jobs wait (fail-closed) rather than run
// unlimited.
func newLimiter(store tollgate.Store, logger *slog.Logger) (*tollgate.Limiter, *insights.Tracker, error) {
	// Every tenant not named here is on the free plan.
	resolver, err := tollgate.NewStaticResolver(plans, "free", map[string]string{
		"acme": "enterprise", "globex": "growth", "initech": "startup", "umbrella": "trial"})
	if err != nil {
		return nil, nil, err
	}
	metrics, err := tollgateprom.New(tollgateprom.WithStore(store), tollgateprom.WithStoreTimeout(storeTimeout))
	if err != nil {
		return nil, nil, err
	}
	prometheus.MustRegister(metrics)
	tracker, err := insights.New(insights.WithPlans(plans[:4]))
	if err != nil {
		return nil, nil, err
	}
	opts := []tollgate.Option{tollgate.WithFailClosed(true), tollgate.WithLogger(logger),
		tollgate.WithObserver(metrics), tollgate.WithObserver(tracker)}
	if os.Getenv("SHADOW") == "1" {
		opts = append(opts, tollgate.WithShadow())
	}
	limiter, err := tollgate.New(store, resolver, opts...)
	return limiter, tracker, err
}

// storeTimeout is how long a Redis call may take: a job can wait longer
// than an API request.
const storeTimeout = 500 * time.Millisecond

// newStore returns where the limits live: in Redis when REDIS_URL is set,
// shared by every worker and API replica; in this process otherwise.
func newStore() (tollgate.Store, func(), error) {
	if os.Getenv("REDIS_URL") == "" {
		return memory.New(), func() {}, nil
	}
	opts, err := redis.ParseURL(os.Getenv("REDIS_URL"))
	if err != nil {
		// Not the parser's error: it would quote the password.
		return nil, nil, errors.New("REDIS_URL is not a valid redis:// URL")
	}
	logging.Disable() // go-redis's plain-text lines: tollgate logs the store's failures as JSON
	client := redis.NewClient(opts)
	store, err := redisstore.New(client, redisstore.WithTimeout(storeTimeout))
	return store, func() { client.Close() }, err
}

// The plans: the API's.
var (
	reportsBudget = tollgate.Policy{Budget: "reports", Limit: tollgate.Limit{Rate: 50.0 / 3600, Burst: 50}} // five reports an hour
	daily30       = tollgate.Policy{Quota: tollgate.Quota{Tokens: 30, Period: tollgate.Daily}}
	plans         = []tollgate.Plan{
		{Name: "free", Limit: tollgate.Limit{Rate: 2, Burst: 20}, Policies: []tollgate.Policy{reportsBudget}},
		{Name: "startup", Limit: tollgate.Limit{Rate: 10, Burst: 100}, Policies: []tollgate.Policy{reportsBudget}},
		{Name: "growth", Limit: tollgate.Limit{Rate: 50, Burst: 500}, Policies: []tollgate.Policy{reportsBudget}},
		{Name: "enterprise", Limit: tollgate.Limit{Rate: 200, Burst: 2000}, Policies: []tollgate.Policy{reportsBudget}},
		{Name: "trial", Limit: tollgate.Limit{Rate: 5, Burst: 10}, Policies: []tollgate.Policy{daily30, reportsBudget}},
	}
)
