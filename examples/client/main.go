// Command client runs a naive client and a paced one side by side against
// the example API, for the same work, and prints what each cost.
//
//	go run ./examples/client
//	go run ./examples/client -duration 15s -workers 8
//
// It serves the API of examples/chi itself, on ADDR (default :8080; port 0
// picks a free one), with plain net/http; REDIS_URL, ADMIN_TOKEN and SHADOW
// mean what they mean there. Each client is a few workers doing jobs for a
// tenant of its own on the free plan (a burst of 20, 2 tokens a second):
// four GET /api/hello (1 token), then a POST /api/reports (10 tokens), each
// job tried until it succeeds. The naive client sends again as soon as it
// gets a 429; the paced one goes through pacer, which waits for the
// Retry-After of a 429 and, while the headers say no token is left, spaces
// its requests by the refill rate. Both get about the same work done, which
// the plan decides, but the naive one sends hundreds of times the requests.
//
// A run lasts at most 20 s: reports also draw from a budget of five an
// hour, which a longer run would spend.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/tollgate-go/tollgate/admin"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/core/tollgatehttp"
	"github.com/tollgate-go/tollgate/insights"
	tollgateprom "github.com/tollgate-go/tollgate/prometheus"
)

func main() {
	duration := flag.Duration("duration", 8*time.Second, "how long both clients work, at most 20s")
	workers := flag.Int("workers", 4, "concurrent workers of each client")
	flag.Parse()
	if *duration <= 0 || *duration > 20*time.Second || *workers < 1 {
		flag.Usage()
		os.Exit(2)
	}
	// The JSON logs go to stderr: stdout carries the table.
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, logger, *duration, *workers)
	stop()
	if err != nil {
		logger.Error("exiting", slog.String("error", err.Error()))
		os.Exit(1)
	}
}

func run(ctx context.Context, logger *slog.Logger, duration time.Duration, workers int) error {
	store, closeStore, err := newStore()
	if err != nil {
		return err
	}
	defer closeStore()
	limiter, tracker, err := newLimiter(store, logger)
	if err != nil {
		return err
	}
	api, err := newAPI(limiter, tracker)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cmp.Or(os.Getenv("ADDR"), ":8080"))
	if err != nil {
		return err
	}
	logger.Info("listening", slog.String("addr", ln.Addr().String()))
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }() // http.ErrServerClosed, once closed
	defer srv.Close()

	naive := &client{name: "naive", tenant: "naive-corp"}
	paced := &client{name: "paced", tenant: "paced-corp"}
	naive.http = &http.Client{Transport: &counting{next: keepAlive(workers), c: naive}}
	paced.http = &http.Client{Transport: &pacer{next: &counting{next: keepAlive(workers), c: paced}}}
	// Start from full buckets, however often the demo ran on this Redis.
	for _, c := range []*client{naive, paced} {
		if err := limiter.Reset(ctx, c.tenant); err != nil {
			return err
		}
	}
	workCtx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	began := time.Now()
	var wg sync.WaitGroup
	for _, c := range []*client{naive, paced} {
		for range workers {
			wg.Go(func() { c.work(workCtx, "http://"+ln.Addr().String()) })
		}
	}
	wg.Wait()
	elapsed := time.Since(began)

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "client\ttenant\trequests sent\t429s received\thellos done\treports done\twork done (tokens)\t")
	for _, c := range []*client{naive, paced} {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t\n", c.name, c.tenant,
			c.sent.Load(), c.throttled.Load(), c.hellos.Load(), c.reports.Load(), c.hellos.Load()+10*c.reports.Load())
	}
	tw.Flush()
	fmt.Printf("\nThe free plan allows %.0f tokens of work in %.1fs (20 + 2/s).\n", 20+2*elapsed.Seconds(), elapsed.Seconds())
	if p := paced.sent.Load(); p > 0 {
		fmt.Printf("The naive client sent %.0fx the requests of the paced one.\n", float64(naive.sent.Load())/float64(p))
	}
	return nil
}

// newAPI returns the example API (see examples/chi) on net/http alone.
func newAPI(limiter *tollgate.Limiter, tracker *insights.Tracker) (http.Handler, error) {
	byTenant := tollgatehttp.WithTenant(tollgatehttp.TenantFromContext(tenantKey{}))
	limitHello := tollgatehttp.Middleware(limiter, byTenant)
	limitReports := tollgatehttp.Middleware(limiter, byTenant, tollgatehttp.WithCost(10), tollgatehttp.WithBudget("reports"))
	mux := http.NewServeMux()
	mux.Handle("GET /api/hello", authenticate(limitHello(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, `{"message":"hello"}`)
	}))))
	mux.Handle("POST /api/reports", authenticate(limitReports(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintln(w, `{"status":"queued"}`)
	}))))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, `{"status":"ok"}`) })
	mux.Handle("GET /metrics", promhttp.Handler())
	if token := os.Getenv("ADMIN_TOKEN"); token != "" {
		h, err := admin.New(admin.Config{Limiter: limiter, Tracker: tracker, Tokens: map[string]string{"admin": token}})
		if err != nil {
			return nil, err
		}
		mux.Handle("/admin/tollgate", http.StripPrefix("/admin/tollgate", h))
		mux.Handle("/admin/tollgate/", http.StripPrefix("/admin/tollgate", h))
	}
	return mux, nil
}

// tenantKey is the context key under which authenticate stores the tenant.
type tenantKey struct{}

// authenticate stands in for the application's authentication: it trusts
// the X-Tenant-ID header, which no production API may do.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant := r.Header.Get("X-Tenant-ID")
		if tenant == "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintln(w, `{"error":"missing_tenant","message":"send X-Tenant-ID"}`)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant)))
	})
}

// A client is one side of the comparison: a tenant, an HTTP client and
// its tallies.
type client struct {
	name, tenant string
	http         *http.Client
	next         atomic.Int64 // job counter
	sent         atomic.Int64 // requests that reached the wire
	throttled    atomic.Int64 // 429s among them
	hellos       atomic.Int64 // GET /api/hello done
	reports      atomic.Int64 // POST /api/reports done
}

// work does jobs until ctx ends. Every fifth job is a report; each job is
// tried until it succeeds, as a naive integration does.
func (c *client) work(ctx context.Context, base string) {
	for ctx.Err() == nil {
		method, path, done := http.MethodGet, "/api/hello", &c.hellos
		if c.next.Add(1)%5 == 0 {
			method, path, done = http.MethodPost, "/api/reports", &c.reports
		}
		for ctx.Err() == nil {
			req, _ := http.NewRequestWithContext(ctx, method, base+path, nil)
			req.Header.Set("X-Tenant-ID", c.tenant)
			resp, err := c.http.Do(req)
			if err != nil {
				continue // the run's end, most likely; the loop checks
			}
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				done.Add(1)
				break
			}
		}
	}
}

// counting is the RoundTripper under each client: it counts what goes on
// the wire, the paced client's retries included.
type counting struct {
	next http.RoundTripper
	c    *client
}

func (t *counting) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err == nil {
		t.c.sent.Add(1)
		if resp.StatusCode == http.StatusTooManyRequests {
			t.c.throttled.Add(1)
		}
	}
	return resp, err
}

// keepAlive returns a transport that keeps a connection per worker.
func keepAlive(workers int) http.RoundTripper {
	return &http.Transport{MaxIdleConnsPerHost: workers}
}

// pacer is an http.RoundTripper that paces requests by the rate-limit
// headers of the answers. While the last answer said that no token is
// left (RateLimit r=0, or a 429), requests leave one refill apart (the
// policy's window over its tokens), and not before the server said more
// is available (RateLimit t, or Retry-After); a 429 is sent again, up to
// three times, if its body can be. Keep one pacer per API key: a budget is
// a tenant's.
type pacer struct {
	next http.RoundTripper

	mu      sync.Mutex
	empty   bool          // the last answer left no token
	resume  time.Time     // no request leaves before then while empty
	spacing time.Duration // the time a token takes to come back
}

func (p *pacer) RoundTrip(req *http.Request) (*http.Response, error) {
	for attempt := 1; ; attempt++ {
		if err := p.wait(req.Context()); err != nil {
			return nil, err
		}
		resp, err := p.next.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		p.learn(resp)
		if resp.StatusCode != http.StatusTooManyRequests || attempt > 3 || (req.Body != nil && req.GetBody == nil) {
			return resp, nil
		}
		resp.Body.Close()
		if req.GetBody != nil {
			if req.Body, err = req.GetBody(); err != nil {
				return nil, err
			}
		}
	}
}

// wait returns when the request's turn comes, or with ctx's error.
func (p *pacer) wait(ctx context.Context) error {
	p.mu.Lock()
	turn := time.Now()
	if p.empty {
		turn = later(turn, p.resume)
		p.resume = turn.Add(p.spacing)
	}
	p.mu.Unlock()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(turn)):
		return nil
	}
}

// learn reads the figures of resp's rate-limit headers.
func (p *pacer) learn(resp *http.Response) {
	p.mu.Lock()
	defer p.mu.Unlock()
	remaining, reset := param(resp.Header.Get("RateLimit"), "r"), param(resp.Header.Get("RateLimit"), "t")
	p.empty = resp.StatusCode == http.StatusTooManyRequests || remaining == 0
	if q, w := param(resp.Header.Get("RateLimit-Policy"), "q"), param(resp.Header.Get("RateLimit-Policy"), "w"); q > 0 && w > 0 {
		p.spacing = time.Duration(w) * time.Second / time.Duration(q)
	}
	if p.empty {
		retry, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		p.resume = later(p.resume, time.Now().Add(time.Duration(max(retry, reset))*time.Second))
	}
}

// param returns the integer parameter name of the first item of a
// structured header such as `"free";r=0;t=1`, or -1.
func param(header, name string) int {
	item, _, _ := strings.Cut(header, ",")
	for _, p := range strings.Split(item, ";")[1:] {
		if k, v, ok := strings.Cut(strings.TrimSpace(p), "="); ok && k == name {
			if n, err := strconv.Atoi(v); err == nil {
				return n
			}
		}
	}
	return -1
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// newLimiter returns the API's Limiter on store, with its metrics
// registered for /metrics, and the tracker of the tenants that hit their
// limits, for the operator's page.
func newLimiter(store tollgate.Store, logger *slog.Logger) (*tollgate.Limiter, *insights.Tracker, error) {
	// Every tenant not named here is on the free plan.
	resolver, err := tollgate.NewStaticResolver(plans, "free", map[string]string{
		"acme": "enterprise", "globex": "growth", "initech": "startup", "umbrella": "trial"})
	if err != nil {
		return nil, nil, err
	}
	metrics, err := tollgateprom.New(tollgateprom.WithStore(store))
	if err != nil {
		return nil, nil, err
	}
	prometheus.MustRegister(metrics)
	tracker, err := insights.New(insights.WithPlans(plans[:4])) // the plans a tenant can buy
	if err != nil {
		return nil, nil, err
	}
	opts := []tollgate.Option{tollgate.WithLogger(logger), tollgate.WithObserver(metrics), tollgate.WithObserver(tracker)}
	if os.Getenv("SHADOW") == "1" {
		opts = append(opts, tollgate.WithShadow()) // decide and record, never deny
	}
	limiter, err := tollgate.New(store, resolver, opts...)
	return limiter, tracker, err
}

// newStore returns where the limits live: in Redis when REDIS_URL is set,
// shared by every replica; in this process otherwise.
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
	store, err := redisstore.New(client)
	return store, func() { client.Close() }, err
}

// The plans, each with a budget of 50 report tokens an hour. A real
// application keeps its plans, and its tenants' plans, in its database and
// finds them through tollgate.NewCachingResolver.
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
