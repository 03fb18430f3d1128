package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tollgate-go/tollgate/examples/internal/demo"
	"github.com/tollgate-go/tollgate/examples/internal/launch"
)

// startupTimeout bounds how long the workers may take to start and reach
// Redis: generous, for a loaded machine.
const startupTimeout = 30 * time.Second

// A proc is a worker process as the coordinator sees it.
type proc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// An event is a message from worker number worker (from 0).
type event struct {
	worker int
	msg    message
	err    error // the worker's output ended or was garbled
}

// coordinate runs the demo: it resets the tenants' limits, starts
// cfg.workers worker processes, starts them all at one instant, follows
// the jobs they report, and returns the summary.
func coordinate(ctx context.Context, cfg config) (*summary, error) {
	if err := resetTenants(ctx, cfg); err != nil {
		return nil, fmt.Errorf("no Redis at %s (start one with redis-server, or pass -redis or REDIS_URL): %w", cfg.redisURL, err)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // kills workers still running, by their own PIDs
	events := make(chan event, 1024)
	procs := make([]*proc, cfg.workers)
	for i := range procs {
		p, err := startWorker(ctx, exe, i, cfg, events)
		if err != nil {
			return nil, err
		}
		procs[i] = p
	}
	defer func() {
		for _, p := range procs {
			if p != nil {
				p.stdin.Close()
				_ = p.cmd.Wait()
			}
		}
	}()

	if err := awaitReady(ctx, events, cfg.workers); err != nil {
		return nil, err
	}
	// Start every worker at one instant, a little ahead, so that none has
	// a head start.
	start := time.Now().Add(100 * time.Millisecond)
	for _, p := range procs {
		if _, err := fmt.Fprintf(p.stdin, "%d\n", start.UnixNano()); err != nil {
			return nil, err
		}
	}
	fmt.Printf("%d worker processes sharing tenants' budgets through %s, for %v:\n", cfg.workers, redactedAddr(cfg.redisURL), cfg.duration)
	for i, p := range procs {
		fmt.Printf("  w%d  pid %d\n", i+1, p.cmd.Process.Pid)
	}
	for _, ld := range loads {
		plan, _ := demo.PlanOf(ld.tenant)
		what := fmt.Sprintf("%g jobs/s", ld.perSec)
		if ld.perSec == 0 {
			what = fmt.Sprintf("a backlog: %d goroutines a worker, taking job after job", floodGoroutines)
		}
		fmt.Printf("  %-8s %-10s %s\n", ld.tenant, plan.Name, what)
	}
	fmt.Println()

	jobs, failures, err := follow(ctx, events, cfg, start)
	if err != nil {
		return nil, err
	}
	return summarize(cfg, start, jobs, failures), nil
}

// resetTenants resets the demo tenants' limits, so that every run starts
// from full buckets.
func resetTenants(ctx context.Context, cfg config) error {
	l, closeStore, err := newLimiter(cfg)
	if err != nil {
		return err
	}
	defer closeStore()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	for _, ld := range loads {
		if err := l.Reset(ctx, ld.tenant); err != nil {
			return err
		}
	}
	return nil
}

// startWorker starts worker i as a process of exe, whose messages go to
// events.
func startWorker(ctx context.Context, exe string, i int, cfg config, events chan<- event) (*proc, error) {
	cmd := launch.Command(ctx, exe, "-worker", strconv.Itoa(i+1), "-n", strconv.Itoa(cfg.workers),
		"-duration", cfg.duration.String(), "-redis", cfg.redisURL, "-prefix", cfg.prefix)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var m message
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				events <- event{worker: i, err: fmt.Errorf("worker %d wrote %q: %w", i+1, sc.Text(), err)}
				return
			}
			events <- event{worker: i, msg: m}
		}
		events <- event{worker: i, err: io.EOF}
	}()
	return &proc{cmd: cmd, stdin: stdin}, nil
}

func awaitReady(ctx context.Context, events <-chan event, n int) error {
	timeout := time.After(startupTimeout)
	for ready := 0; ready < n; {
		select {
		case e := <-events:
			switch {
			case e.err != nil:
				return fmt.Errorf("worker %d ended before it was ready: %w", e.worker+1, e.err)
			case e.msg.Ready:
				ready++
			}
		case <-timeout:
			return fmt.Errorf("the workers were not ready after %v", startupTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// A job is one job a worker started.
type job struct {
	worker  int
	tenant  string
	start   time.Time
	waited  time.Duration
	delayed bool
}

// follow collects the jobs the workers report until every worker is done,
// printing the counts so far every 5 seconds.
func follow(ctx context.Context, events <-chan event, cfg config, start time.Time) ([]job, int64, error) {
	var jobs []job
	var failures int64
	counts := map[string]int{}
	progress := time.NewTicker(5 * time.Second)
	defer progress.Stop()
	deadline := time.After(time.Until(start) + cfg.duration + startupTimeout)
	finished := make([]bool, cfg.workers)
	for done := 0; done < cfg.workers; {
		select {
		case e := <-events:
			switch {
			case errors.Is(e.err, io.EOF) && finished[e.worker]:
				// Its output ends after its last message.
			case errors.Is(e.err, io.EOF):
				return nil, 0, fmt.Errorf("worker %d ended before it was done", e.worker+1)
			case e.err != nil:
				return nil, 0, e.err
			case e.msg.Done:
				finished[e.worker] = true
				done++
				failures += e.msg.Failures
			case e.msg.Tenant != "":
				jobs = append(jobs, job{worker: e.worker, tenant: e.msg.Tenant, start: time.Unix(0, e.msg.Start),
					waited: time.Duration(e.msg.Waited), delayed: e.msg.Delay > 0})
				counts[e.msg.Tenant]++
			}
		case <-progress.C:
			parts := make([]string, 0, len(loads))
			for _, ld := range loads {
				parts = append(parts, fmt.Sprintf("%s %d", ld.tenant, counts[ld.tenant]))
			}
			fmt.Printf("  %3.0fs  jobs started: %s\n", time.Since(start).Seconds(), strings.Join(parts, ", "))
		case <-deadline:
			return nil, 0, errors.New("the workers did not finish in time")
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
	return jobs, failures, nil
}

// summary is what the demo found, per tenant.
type summary struct {
	Workers   int             `json:"workers"`
	DurationS float64         `json:"duration_s"`
	Failures  int64           `json:"failures"` // Waits that failed on the store and were tried again
	Tenants   []tenantSummary `json:"tenants"`
}

type tenantSummary struct {
	Tenant   string  `json:"tenant"`
	Plan     string  `json:"plan"`
	PlanRate float64 `json:"plan_rate"` // the plan's jobs a second
	Burst    int64   `json:"burst"`
	Offered  float64 `json:"offered"` // jobs a second sent; 0 for the backlog
	Jobs     int     `json:"jobs"`

	// Rate is jobs a second over the run; RateBeyondBurst, for the
	// backlog, is the jobs beyond the plan's burst a second, from the
	// start of the run to the last job: the pace Wait held the backlog
	// to once the burst was spent.
	Rate            float64 `json:"rate"`
	RateBeyondBurst float64 `json:"rate_beyond_burst"`

	Delayed   int     `json:"delayed"` // jobs whose Wait reserved a later turn
	WaitP50Ms float64 `json:"wait_p50_ms"`
	WaitMaxMs float64 `json:"wait_max_ms"`
	PerWorker []int   `json:"per_worker"` // jobs each worker started
}

func summarize(cfg config, start time.Time, jobs []job, failures int64) *summary {
	s := &summary{Workers: cfg.workers, DurationS: cfg.duration.Seconds(), Failures: failures}
	for _, ld := range loads {
		plan, _ := demo.PlanOf(ld.tenant)
		ts := tenantSummary{Tenant: ld.tenant, Plan: plan.Name, PlanRate: plan.Limit.Rate, Burst: plan.Limit.Burst,
			Offered: ld.perSec, PerWorker: make([]int, cfg.workers)}
		var waits []time.Duration
		var last time.Time
		for _, j := range jobs {
			if j.tenant != ld.tenant {
				continue
			}
			ts.Jobs++
			ts.PerWorker[j.worker]++
			waits = append(waits, j.waited)
			if j.delayed {
				ts.Delayed++
			}
			if j.start.After(last) {
				last = j.start
			}
		}
		ts.Rate = float64(ts.Jobs) / cfg.duration.Seconds()
		if beyond := int64(ts.Jobs) - plan.Limit.Burst; ld.perSec == 0 && beyond > 0 {
			// The burst is spent at the first job, after the start:
			// counting from the start never makes the pace look
			// faster than it was.
			ts.RateBeyondBurst = float64(beyond) / last.Sub(start).Seconds()
		}
		if len(waits) > 0 {
			slices.Sort(waits)
			ts.WaitP50Ms = ms(waits[len(waits)/2])
			ts.WaitMaxMs = ms(waits[len(waits)-1])
		}
		s.Tenants = append(s.Tenants, ts)
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// print writes the summary as a table and what it shows.
func (s *summary) print(w io.Writer) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "tenant\tplan\tplan's rate\tsent\tjobs\tjobs/s\tdelayed\twait: median\tmax\tjobs per worker")
	for _, t := range s.Tenants {
		sent, rate := fmt.Sprintf("%g/s", t.Offered), fmt.Sprintf("%.2f", t.Rate)
		if t.Offered == 0 {
			sent, rate = "backlog", fmt.Sprintf("%.2f beyond the burst", t.RateBeyondBurst)
		}
		perWorker := make([]string, len(t.PerWorker))
		for i, n := range t.PerWorker {
			perWorker[i] = strconv.Itoa(n)
		}
		fmt.Fprintf(tw, "%s\t%s\t%g/s, burst %d\t%s\t%d\t%s\t%d\t%s\t%s\t%s\n", t.Tenant, t.Plan, t.PlanRate, t.Burst,
			sent, t.Jobs, rate, t.Delayed, duration(t.WaitP50Ms), duration(t.WaitMaxMs), strings.Join(perWorker, " "))
	}
	tw.Flush()
	fmt.Fprintln(w)
	var others, othersDelayed int
	var othersMax float64
	for _, t := range s.Tenants {
		if t.Offered == 0 {
			fmt.Fprintf(w, "%s's backlog: %d jobs at once (its burst), then %.2f jobs/s against its plan's %g/s,\n"+
				"shared by %d worker processes through one Redis, each taking its turn with Wait.\n",
				t.Tenant, t.Burst, t.RateBeyondBurst, t.PlanRate, s.Workers)
			continue
		}
		others += t.Jobs
		othersDelayed += t.Delayed
		othersMax = max(othersMax, t.WaitMaxMs)
	}
	fmt.Fprintf(w, "The other tenants' jobs did not wait for it: %d of their %d jobs had to wait for a turn,\n"+
		"and the slowest started %s after it was ready (Wait's round trip to Redis).\n", othersDelayed, others, duration(othersMax))
	if s.Failures > 0 {
		fmt.Fprintf(w, "%d Waits failed on Redis (slower than 500ms) and were tried again.\n", s.Failures)
	}
}

func duration(msecs float64) string {
	d := time.Duration(msecs * float64(time.Millisecond))
	if d >= time.Second {
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(100 * time.Microsecond).String()
}

// redactedAddr returns the host of a Redis URL, without its credentials.
func redactedAddr(raw string) string {
	opts, err := demo.ParseRedisURL(raw)
	if err != nil {
		return "Redis"
	}
	return fmt.Sprintf("Redis at %s (db %d)", opts.Addr, opts.DB)
}
