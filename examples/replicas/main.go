// Command replicas makes tollgate's shared budget visible: it starts several
// replicas of one example app on loopback ports, all on one Redis, spreads
// traffic over them as a load balancer would (one tenant flooding, others
// behaving), and prints for each tenant what each replica allowed and the
// total against the plan's budget.
//
//	go run ./examples/replicas                       # 3 gin replicas, redis://127.0.0.1:6379/0
//	go run ./examples/replicas -fw fiber -n 4 -duration 10s
//	go run ./examples/replicas -memory               # no Redis: see what goes wrong
//
// With Redis, the flooding tenant gets its plan's budget in total, however
// many replicas share the load. With -memory each replica keeps its own
// buckets, and the tenant gets its budget from each of them.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/examples/internal/demo"
	"github.com/tollgate-go/tollgate/examples/internal/launch"
)

// traffic is what one tenant sends, in requests a second of GET /api/hello.
type traffic struct {
	tenant string
	rps    float64
	note   string
}

func main() {
	fw := flag.String("fw", "gin", "example app to run: gin, echo, chi, fiber, echov5 or fiberv3")
	n := flag.Int("n", 3, "number of replicas")
	redisURL := flag.String("redis", "redis://127.0.0.1:6379/0", "Redis the replicas share")
	memoryOnly := flag.Bool("memory", false, "run the replicas without Redis, each with its own buckets")
	duration := flag.Duration("duration", 5*time.Second, "how long the traffic lasts")
	floodRPS := flag.Float64("flood-rps", 400, "requests a second from the flooding tenant")
	flag.Parse()
	if !slices.Contains(launch.Frameworks, *fw) || *n < 1 || *duration <= 0 || *floodRPS <= 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	mix := []traffic{
		{"initech", *floodRPS, "a retry loop gone wrong"},
		{"acme", 40, ""},
		{"globex", 20, ""},
		{"hooli", 1, ""},
	}
	if err := run(ctx, *fw, *n, *redisURL, *memoryOnly, *duration, mix); err != nil {
		fmt.Fprintln(os.Stderr, "replicas:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, fw string, n int, redisURL string, memoryOnly bool, duration time.Duration, mix []traffic) error {
	var env []string
	where := "each with its own in-memory buckets"
	if !memoryOnly {
		opts, err := redis.ParseURL(redisURL)
		if err != nil {
			return fmt.Errorf("-redis: %w", err)
		}
		if err := resetBuckets(ctx, opts, mix); err != nil {
			return fmt.Errorf("no Redis at %s (start one with redis-server, pass -redis, or run with -memory): %w", opts.Addr, err)
		}
		env = append(env, "REDIS_URL="+redisURL)
		where = fmt.Sprintf("sharing one Redis (%s, db %d)", opts.Addr, opts.DB)
	}

	dir, err := os.MkdirTemp("", "tollgate-replicas-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Printf("building the %s example app...\n", fw)
	bins, err := launch.Build(ctx, dir, fw)
	if err != nil {
		return err
	}
	replicas := make([]*launch.App, 0, n)
	defer func() {
		for _, r := range replicas {
			_ = r.Stop() // by its own PID
		}
	}()
	for range n {
		app, err := launch.Start(ctx, bins[fw], env...)
		if err != nil {
			return err
		}
		replicas = append(replicas, app)
	}
	fmt.Printf("%d %s replicas %s:\n", n, fw, where)
	for i, r := range replicas {
		fmt.Printf("  r%d  pid %-7d %s\n", i+1, r.PID(), r.Addr)
	}
	fmt.Printf("sending GET /api/hello for %v, round robin over the replicas:\n", duration)
	for _, m := range mix {
		note := ""
		if m.note != "" {
			note = "  (" + m.note + ")"
		}
		fmt.Printf("  %-8s %5.0f requests/s%s\n", m.tenant, m.rps, note)
	}
	fmt.Println()

	tallies, elapsed := drive(ctx, replicas, mix, duration)
	report(replicas, mix, tallies, elapsed, memoryOnly)

	// The business signal: what a replica logged about the flood.
	logCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for i, r := range replicas {
		line, err := r.WaitLog(logCtx, func(m map[string]any) bool {
			return m["msg"] == "request throttled" && m["tenant_id"] == mix[0].tenant
		})
		if err == nil {
			js, _ := json.Marshal(line)
			fmt.Printf("\nr%d's first log line about %s:\n  %s\n", i+1, mix[0].tenant, js)
			break
		}
	}
	return nil
}

// resetBuckets resets the demo tenants' limits, so that every run starts
// from full buckets.
func resetBuckets(ctx context.Context, opts *redis.Options, mix []traffic) error {
	c := redis.NewClient(opts)
	defer c.Close()
	store, err := redisstore.New(c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	plans, err := demo.Plans()
	if err != nil {
		return err
	}
	l, err := tollgate.New(store, plans, tollgate.WithLogger(nil))
	if err != nil {
		return err
	}
	for _, m := range mix {
		// Every policy of the tenant's plan, budgets and quotas too.
		if err := l.Reset(ctx, m.tenant); err != nil {
			return err
		}
	}
	return nil
}

// tally counts one tenant's answers from one replica.
type tally struct {
	allowed, throttled, failed atomic.Int64
	unlimited                  atomic.Int64 // allowed without figures: the store failed (fail-open)
}

// drive sends mix to the replicas for duration and returns the tallies by
// tenant and replica, and how long the traffic took.
func drive(ctx context.Context, replicas []*launch.App, mix []traffic, duration time.Duration) ([][]*tally, time.Duration) {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 64
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	inFlight := make(chan struct{}, 128) // bounds the sockets the flood may open

	tallies := make([][]*tally, len(mix))
	for i := range tallies {
		tallies[i] = make([]*tally, len(replicas))
		for j := range tallies[i] {
			tallies[i][j] = &tally{}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	began := time.Now()
	var requests sync.WaitGroup
	var senders sync.WaitGroup
	for i, m := range mix {
		senders.Go(func() {
			tick := time.NewTicker(time.Duration(float64(time.Second) / m.rps))
			defer tick.Stop()
			for next := 0; ; next++ {
				r := next % len(replicas) // the load balancer
				t := tallies[i][r]
				select {
				case <-ctx.Done():
					return
				case inFlight <- struct{}{}:
				}
				requests.Go(func() {
					defer func() { <-inFlight }()
					hello(client, replicas[r].URL, m.tenant, t)
				})
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		})
	}
	senders.Wait()
	requests.Wait()
	return tallies, time.Since(began)
}

func hello(client *http.Client, base, tenant string, t *tally) {
	req, err := http.NewRequest(http.MethodGet, base+"/api/hello", nil)
	if err != nil {
		t.failed.Add(1)
		return
	}
	req.Header.Set(demo.TenantHeader, tenant)
	resp, err := client.Do(req)
	if err != nil {
		t.failed.Add(1)
		return
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		t.allowed.Add(1)
		if resp.Header.Get("X-RateLimit-Limit") == "" {
			t.unlimited.Add(1)
		}
	case http.StatusTooManyRequests:
		t.throttled.Add(1)
	default:
		t.failed.Add(1)
	}
}

func report(replicas []*launch.App, mix []traffic, tallies [][]*tally, elapsed time.Duration, memoryOnly bool) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"tenant", "plan", "sent"}
	for i := range replicas {
		head = append(head, fmt.Sprintf("r%d allowed", i+1))
	}
	head = append(head, "total allowed", "plan's budget", "429s", "fail-open", "")
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	var failed, failOpen int64
	for i, m := range mix {
		plan, _ := demo.PlanOf(m.tenant)
		var allowed, throttled, sent, unlimited int64
		row := []string{m.tenant, plan.Name, ""}
		for _, t := range tallies[i] {
			a, th, f, u := t.allowed.Load(), t.throttled.Load(), t.failed.Load(), t.unlimited.Load()
			allowed, throttled, sent, unlimited = allowed+a, throttled+th, sent+a+th+f, unlimited+u
			failed += f
			row = append(row, fmt.Sprint(a))
		}
		failOpen += unlimited
		row[2] = fmt.Sprint(sent)
		row = append(row, fmt.Sprint(allowed), fmt.Sprintf("%.0f", demo.Budget(plan, elapsed)), fmt.Sprint(throttled), fmt.Sprint(unlimited), "")
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
	fmt.Printf("\nbudget = burst + rate x %.1fs of traffic, for a tenant whose bucket starts full.\n", elapsed.Seconds())
	if failOpen > 0 {
		fmt.Printf("fail-open: allowed without a decision, as Redis did not answer within the store's timeout\n"+
			"(%d requests; a machine this loaded by the flood is slow to answer). See docs on the failure policy.\n", failOpen)
	}
	if failed > 0 {
		fmt.Printf("%d requests failed (no answer, or a status other than 200 and 429).\n", failed)
	}

	flood := mix[0].tenant
	plan, _ := demo.PlanOf(flood)
	budget := demo.Budget(plan, elapsed)
	var allowed, unlimited int64
	for _, t := range tallies[0] {
		allowed += t.allowed.Load()
		unlimited += t.unlimited.Load()
	}
	limit := fmt.Sprintf("%s: %d burst + %g/s", plan.Name, plan.Limit.Burst, plan.Limit.Rate)
	if memoryOnly {
		fmt.Printf("Without Redis, %s (%s) got %d requests through %d replicas: about %d x its budget of %.0f,\n"+
			"because each replica counted on its own. Run without -memory to share one bucket.\n",
			flood, limit, allowed, len(replicas), len(replicas), budget)
		return
	}
	extra := ""
	if unlimited > 0 {
		extra = fmt.Sprintf(" (and %d more fail-open)", unlimited)
	}
	fmt.Printf("%s (%s) got %d requests through %d replicas%s: its budget of %.0f once, not %d times,\n"+
		"because every replica takes from one bucket in Redis. The other tenants were not slowed down.\n",
		flood, limit, allowed-unlimited, len(replicas), extra, budget, len(replicas))
}
