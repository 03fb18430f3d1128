// Command client runs a naive client and a paced one side by side against
// one example app, for the same work, and prints what each cost.
//
//	go run ./examples/client                 # against the chi app, 8 s
//	go run ./examples/client -fw gin -duration 15s
//
// Each client is 4 workers doing jobs for a tenant of its own on the free
// plan (20 tokens of burst, 2 a second): four GET /api/hello (1 token) then
// a POST /api/reports (10 tokens), over and over, each job tried until it
// succeeds. The naive client sends again as soon as it gets a 429; the paced
// one goes through pacer.Transport, which waits for Retry-After and for the
// refill that the rate-limit headers announce. Both get about the same work
// done, as the plan decides that, but the naive one sends a thousand times
// the requests, and its reports starve: the hellos of its other workers take
// every token as it comes back, so 10 are seldom there at once.
//
// Runs last at most 20 s: reports also draw from a budget of five an hour,
// which a longer run would spend, and then no client gets a report through.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/tollgate-go/tollgate/examples/client/pacer"
	"github.com/tollgate-go/tollgate/examples/internal/demo"
	"github.com/tollgate-go/tollgate/examples/internal/launch"
)

func main() {
	fw := flag.String("fw", "chi", "example app to run: gin, echo, chi, fiber, echov5 or fiberv3")
	duration := flag.Duration("duration", 8*time.Second, "how long both clients work, at most 20s")
	workers := flag.Int("workers", 4, "concurrent workers per client")
	flag.Parse()
	// Past maxDuration the reports budget (five reports an hour) runs out
	// too, and a report that must wait an hour is no test of pacing.
	if !slices.Contains(launch.Frameworks, *fw) || *workers < 1 || *duration <= 0 || *duration > maxDuration {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *fw, *duration, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
}

// maxDuration keeps a run within what the free plan's bucket decides: at
// 14 tokens a job cycle, five reports take about 25 s of its refill.
const maxDuration = 20 * time.Second

func run(ctx context.Context, fw string, duration time.Duration, workers int) error {
	dir, err := os.MkdirTemp("", "tollgate-client-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Printf("building the %s example app...\n", fw)
	bins, err := launch.Build(ctx, dir, fw)
	if err != nil {
		return err
	}
	app, err := launch.Start(ctx, bins[fw]) // memory store: one process
	if err != nil {
		return err
	}
	defer func() { _ = app.Stop() }()

	naive := &client{name: "naive", tenant: "naive-corp"}
	paced := &client{name: "paced", tenant: "paced-corp"}
	naive.http = &http.Client{Transport: &counting{next: keepAlive(workers), c: naive}}
	paced.http = &http.Client{Transport: &pacer.Transport{Base: &counting{next: keepAlive(workers), c: paced}}}

	fmt.Printf("%s app (pid %d) at %s; two free-plan tenants, %d workers each, for %v\n\n",
		fw, app.PID(), app.Addr, workers, duration)
	workCtx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	began := time.Now()
	var wg sync.WaitGroup
	for _, c := range []*client{naive, paced} {
		for range workers {
			wg.Go(func() { c.work(workCtx, app.URL) })
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
	free, err := demo.PlanOf(naive.tenant)
	if err != nil {
		return err
	}
	fmt.Printf("\nThe %s plan allows %.0f tokens of work in %.1fs (%d + %g/s), and both clients got about that done.\n",
		free.Name, demo.Budget(free, elapsed), elapsed.Seconds(), free.Limit.Burst, free.Limit.Rate)
	if p := paced.sent.Load(); p > 0 {
		fmt.Printf("The naive client sent %.0fx the requests of the paced one to do it.\n", float64(naive.sent.Load())/float64(p))
	}
	return nil
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
// tried until it succeeds, which is what a naive integration does.
func (c *client) work(ctx context.Context, base string) {
	for ctx.Err() == nil {
		method, path, done := http.MethodGet, "/api/hello", &c.hellos
		if c.next.Add(1)%5 == 0 {
			method, path, done = http.MethodPost, "/api/reports", &c.reports
		}
		for ctx.Err() == nil {
			req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
			if err != nil {
				return
			}
			req.Header.Set("X-Tenant-ID", c.tenant)
			resp, err := c.http.Do(req)
			if err != nil {
				continue // the deadline, most likely; the loop checks
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
// the wire, so the paced client's waits and retries are counted too.
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

// keepAlive returns a transport that keeps a connection per worker, so
// that the naive client's thousands of requests do not each open one.
func keepAlive(workers int) http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = workers
	return t
}
