// Command worker shows background workers that share tenants' budgets
// through Redis with tollgate's Limiter.Wait: it starts worker processes on
// one Redis, floods one tenant with jobs while the others send a steady
// trickle, and prints for each tenant the rate its jobs ran at against its
// plan's rate, and how long its jobs waited for their turn.
//
//	go run ./examples/worker                       # 4 processes for 30s, on $REDIS_URL or redis://127.0.0.1:6379/0
//	go run ./examples/worker -n 8 -duration 10s
//
// A worker calls Wait before each job instead of trying and backing off on
// refusals: Wait reserves the tenant's next slot in Redis, atomically, and
// sleeps until it. Slots are handed out in order of arrival across every
// process, so the flooded tenant's jobs run at its plan's rate and no
// faster, however many workers and goroutines want them, while each of the
// other tenants has a bucket of its own and its jobs start at once.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/redis/go-redis/v9"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/examples/internal/demo"
)

// A load is the jobs one tenant has: a flood (every worker runs
// floodGoroutines goroutines that take job after job as fast as the
// tenant's budget allows), or a steady number of jobs a second, spread over
// the workers.
type load struct {
	tenant string
	perSec float64 // 0: a flood
}

// loads are the demo's tenants (their plans are demo.Tenants'): initech,
// on the startup plan (100 burst, 10/s), has a backlog far beyond its
// rate; the others send what their plans allow, and should not notice.
var loads = []load{
	{tenant: "initech"},            // startup: 10/s
	{tenant: "acme", perSec: 40},   // enterprise: 200/s
	{tenant: "globex", perSec: 20}, // growth: 50/s
	{tenant: "hooli", perSec: 1},   // free: 2/s
}

// floodGoroutines is how many goroutines of each worker take the flooded
// tenant's jobs.
const floodGoroutines = 16

// jobTime is how long a job takes once it has its turn.
const jobTime = 10 * time.Millisecond

func main() {
	defaultURL := os.Getenv("REDIS_URL")
	if defaultURL == "" {
		defaultURL = "redis://127.0.0.1:6379/0"
	}
	n := flag.Int("n", 4, "number of worker processes")
	duration := flag.Duration("duration", 30*time.Second, "how long the workers run")
	redisURL := flag.String("redis", defaultURL, "Redis the workers share (default $REDIS_URL, else redis://127.0.0.1:6379/0)")
	prefix := flag.String("prefix", redisstore.DefaultPrefix, "prefix of the keys in Redis")
	asJSON := flag.Bool("json", false, "also print the summary as one JSON line, last")
	worker := flag.Int("worker", 0, "run as worker number `id` (> 0) of a demo, reading its start time from stdin")
	flag.Parse()
	if *n < 1 || *duration <= 0 || *worker < 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg := config{workers: *n, duration: *duration, redisURL: *redisURL, prefix: *prefix}
	var err error
	if *worker > 0 {
		err = runWorker(ctx, *worker, cfg)
	} else {
		var s *summary
		if s, err = coordinate(ctx, cfg); err == nil {
			s.print(os.Stdout)
			if *asJSON {
				err = json.NewEncoder(os.Stdout).Encode(s)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// config is what the coordinator and its workers share.
type config struct {
	workers  int
	duration time.Duration
	redisURL string
	prefix   string
}

// newLimiter returns a Limiter on the Redis of cfg with the demo's plans,
// and a function that closes its client.
//
// Workers are not in a hurry, so the choices differ from an API's: a Redis
// call may take up to half a second, and when Redis fails, the job waits
// rather than run unlimited (tollgate.FailClosed: Wait returns the error,
// and the worker tries again shortly).
func newLimiter(cfg config) (*tollgate.Limiter, func(), error) {
	opts, err := demo.ParseRedisURL(cfg.redisURL)
	if err != nil {
		return nil, nil, err
	}
	client := redis.NewClient(opts)
	store, err := redisstore.New(client, redisstore.WithPrefix(cfg.prefix))
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	plans, err := demo.Plans()
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	l, err := tollgate.New(store, plans,
		tollgate.WithFailurePolicy(tollgate.FailClosed),
		tollgate.WithStoreTimeout(500*time.Millisecond),
		// Stdout carries the jobs' reports to the coordinator.
		tollgate.WithLogger(nil))
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return l, func() { client.Close() }, nil
}
