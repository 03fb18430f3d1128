// Command replicas makes tollgate's shared budget visible. It runs several
// replicas of the example API in one process, each with a Limiter and a
// store connection of its own as separate processes would have, behind a
// round-robin load balancer on ADDR; sends one tenant's flood and other
// tenants' steady traffic through the balancer; prints what each replica
// allowed against each plan's budget; and goes on serving until
// interrupted.
//
//	REDIS_URL=redis://127.0.0.1:6379/0 go run ./examples/replicas  # one budget in Redis
//	go run ./examples/replicas                                     # each replica counts alone
//
// Environment: ADDR (the balancer's; default :8080, port 0 picks a free
// one), REDIS_URL (unset: each replica keeps its limits in memory),
// ADMIN_TOKEN (set: the operator's page and API under /admin/tollgate, on
// every replica), SHADOW=1 (decide and record, never deny). The replicas
// serve the API of examples/chi: GET /api/hello (1 token), POST
// /api/reports (10), GET /healthz, GET /metrics, the tenant in X-Tenant-ID.
// Answers carry X-Replica, the replica that served them. The JSON logs go
// to stderr; the table to stdout.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
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

// traffic is what one tenant sends, in GET /api/hello a second.
type traffic struct {
	tenant string
	rps    float64
}

func main() {
	n := flag.Int("n", 3, "replicas to run")
	duration := flag.Duration("duration", 5*time.Second, "how long the demo traffic lasts; 0 sends none")
	flood := flag.Float64("flood", 400, "requests a second of the flooding tenant, initech")
	flag.Parse()
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, logger, *n, *duration, []traffic{{"initech", *flood}, {"acme", 40}, {"globex", 20}, {"hooli", 1}})
	stop()
	if err != nil {
		logger.Error("exiting", slog.String("error", err.Error()))
		os.Exit(1)
	}
}

func run(ctx context.Context, logger *slog.Logger, n int, duration time.Duration, mix []traffic) error {
	// Every tenant not named here is on the free plan.
	resolver, err := tollgate.NewStaticResolver(plans, "free", map[string]string{
		"acme": "enterprise", "globex": "growth", "initech": "startup", "umbrella": "trial"})
	if err != nil {
		return err
	}
	// One collector and one tracker observe every replica, as a
	// Prometheus server and the fleet's page would see them all.
	metrics, err := tollgateprom.New()
	if err != nil {
		return err
	}
	prometheus.MustRegister(metrics)
	tracker, err := insights.New(insights.WithPlans(plans[:4]))
	if err != nil {
		return err
	}
	opts := []tollgate.Option{tollgate.WithLogger(logger), tollgate.WithObserver(metrics), tollgate.WithObserver(tracker)}
	if os.Getenv("SHADOW") == "1" {
		opts = append(opts, tollgate.WithShadow())
	}
	var replicas []*url.URL
	for i := range n {
		store, closeStore, err := newStore()
		if err != nil {
			return err
		}
		defer closeStore()
		limiter, err := tollgate.New(store, resolver, opts...)
		if err != nil {
			return err
		}
		// Every run starts from full buckets, budgets and quotas.
		for _, t := range mix {
			if err := limiter.Reset(ctx, t.tenant); err != nil {
				return err
			}
		}
		h, err := newReplica(fmt.Sprintf("r%d", i+1), limiter, tracker)
		if err != nil {
			return err
		}
		addr, err := listen(ctx, "127.0.0.1:0", h)
		if err != nil {
			return err
		}
		logger.Info("replica listening", slog.String("replica", fmt.Sprintf("r%d", i+1)), slog.String("addr", addr))
		replicas = append(replicas, &url.URL{Scheme: "http", Host: addr})
	}

	var next atomic.Uint64
	balancer := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(replicas[next.Add(1)%uint64(len(replicas))])
	}}
	addr, err := listen(ctx, cmp.Or(os.Getenv("ADDR"), ":8080"), balancer)
	if err != nil {
		return err
	}
	logger.Info("listening", slog.String("addr", addr), slog.Int("replicas", n))
	if duration > 0 {
		elapsed, tallies := send(ctx, "http://"+addr, mix, duration)
		report(os.Stdout, resolver, n, mix, elapsed, tallies)
	}
	<-ctx.Done()
	return nil
}

// newReplica returns the API of one replica, named name.
func newReplica(name string, limiter *tollgate.Limiter, tracker *insights.Tracker) (http.Handler, error) {
	byTenant := tollgatehttp.WithTenant(tollgatehttp.TenantFromContext(tenantKey{}))
	limitHello := tollgatehttp.Middleware(limiter, byTenant)
	limitReports := tollgatehttp.Middleware(limiter, byTenant, tollgatehttp.WithCost(10), tollgatehttp.WithBudget("reports"))
	mux := http.NewServeMux()
	mux.Handle("GET /api/hello", authenticate(limitHello(answer(http.StatusOK, "hello"))))
	mux.Handle("POST /api/reports", authenticate(limitReports(answer(http.StatusAccepted, "report queued"))))
	mux.Handle("GET /healthz", answer(http.StatusOK, "ok"))
	mux.Handle("GET /metrics", promhttp.Handler())
	if token := os.Getenv("ADMIN_TOKEN"); token != "" {
		h, err := admin.New(admin.Config{Limiter: limiter, Tracker: tracker, Tokens: map[string]string{"admin": token}})
		if err != nil {
			return nil, err
		}
		mux.Handle("/admin/tollgate", http.StripPrefix("/admin/tollgate", h))
		mux.Handle("/admin/tollgate/", http.StripPrefix("/admin/tollgate", h))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Replica", name)
		mux.ServeHTTP(w, r)
	}), nil
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

// answer returns a handler that answers status and {"message": message}.
func answer(status int, message string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]string{"message": message})
	})
}

// listen serves h on addr until ctx ends, and returns the address it got.
func listen(ctx context.Context, addr string, h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }() // http.ErrServerClosed, once closed
	context.AfterFunc(ctx, func() { srv.Close() })
	return ln.Addr().String(), nil
}

// tally counts one tenant's answers, by replica.
type tally struct {
	mu        sync.Mutex
	sent      int
	allowed   map[string]int // by X-Replica
	throttled int
	failOpen  int // allowed without figures: the store failed
}

// send sends mix through the balancer at url for duration, and returns how
// long it took and a tally per tenant.
func send(ctx context.Context, url string, mix []traffic, duration time.Duration) (time.Duration, []*tally) {
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 64, MaxIdleConnsPerHost: 64}, Timeout: 5 * time.Second}
	ctx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	began := time.Now()
	tallies := make([]*tally, len(mix))
	var wg sync.WaitGroup
	for i, m := range mix {
		t := &tally{allowed: map[string]int{}}
		tallies[i] = t
		wg.Go(func() {
			tick := time.NewTicker(time.Duration(float64(time.Second) / m.rps))
			defer tick.Stop()
			for ctx.Err() == nil {
				wg.Go(func() { t.count(hello(client, url, m.tenant)) })
				select {
				case <-ctx.Done():
				case <-tick.C:
				}
			}
		})
	}
	wg.Wait()
	return time.Since(began), tallies
}

func hello(client *http.Client, url, tenant string) *http.Response {
	req, _ := http.NewRequest(http.MethodGet, url+"/api/hello", nil)
	req.Header.Set("X-Tenant-ID", tenant)
	resp, err := client.Do(req)
	if err != nil {
		return nil
	}
	resp.Body.Close()
	return resp
}

func (t *tally) count(resp *http.Response) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sent++
	switch {
	case resp == nil:
	case resp.StatusCode == http.StatusOK && resp.Header.Get("RateLimit") == "":
		t.failOpen++
	case resp.StatusCode == http.StatusOK:
		t.allowed[resp.Header.Get("X-Replica")]++
	case resp.StatusCode == http.StatusTooManyRequests:
		t.throttled++
	}
}

// report prints what each replica allowed of each tenant's traffic,
// against the plan's budget: the burst, and the rate over the time sent.
func report(w io.Writer, resolver tollgate.PlanResolver, n int, mix []traffic, elapsed time.Duration, tallies []*tally) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"tenant", "plan", "sent"}
	for i := range n {
		head = append(head, fmt.Sprintf("r%d allowed", i+1))
	}
	fmt.Fprintln(tw, strings.Join(append(head, "total allowed", "plan's budget", "429s", "fail-open", ""), "\t"))
	for i, m := range mix {
		t := tallies[i]
		plan, _ := resolver.ResolvePlan(context.Background(), m.tenant)
		row, total := []string{m.tenant, plan.Name, fmt.Sprint(t.sent)}, 0
		for r := range n {
			row = append(row, fmt.Sprint(t.allowed[fmt.Sprintf("r%d", r+1)]))
			total += t.allowed[fmt.Sprintf("r%d", r+1)]
		}
		budget := float64(plan.Limit.Burst) + plan.Limit.Rate*elapsed.Seconds()
		row = append(row, fmt.Sprint(total), fmt.Sprintf("%.0f", budget), fmt.Sprint(t.throttled), fmt.Sprint(t.failOpen), "")
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
	where := "one bucket per tenant in Redis, which every replica takes from"
	if os.Getenv("REDIS_URL") == "" {
		where = "no shared store: each replica counts on its own, so a tenant gets its budget once per replica"
	}
	fmt.Fprintf(w, "\n%d replicas for %.1fs; budget = burst + rate x time; %s.\n", n, elapsed.Seconds(), where)
}

// newStore returns where one replica keeps its limits: in Redis when
// REDIS_URL is set, shared by every replica; in this replica otherwise.
func newStore() (tollgate.Store, func(), error) {
	if os.Getenv("REDIS_URL") == "" {
		return memory.New(), func() {}, nil
	}
	opts, err := redis.ParseURL(os.Getenv("REDIS_URL"))
	if err != nil {
		// Not the parser's error: it would quote the password.
		return nil, nil, errors.New("REDIS_URL is not a valid redis:// URL")
	}
	logging.Disable()               // go-redis's plain-text lines: tollgate logs the store's failures as JSON
	client := redis.NewClient(opts) // a connection pool of its own, as a process would have
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
