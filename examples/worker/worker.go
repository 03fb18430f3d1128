package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// A message is one line a worker writes to the coordinator on stdout: that
// it is ready, a job it started, or that it is done.
type message struct {
	Ready bool `json:"ready,omitempty"`
	Done  bool `json:"done,omitempty"`

	Tenant string `json:"tenant,omitempty"`
	Start  int64  `json:"start,omitempty"`  // when the job started, Unix nanoseconds
	Waited int64  `json:"waited,omitempty"` // nanoseconds from ready to started
	Delay  int64  `json:"delay,omitempty"`  // nanoseconds Wait reserved: 0 when the tokens were there

	Failures int64 `json:"failures,omitempty"` // Waits that failed on the store
}

// runWorker is one worker process: it connects, says it is ready, reads
// the start time from stdin, and then takes jobs of every tenant of loads
// until the end of the run, reporting each job it starts.
func runWorker(ctx context.Context, id int, cfg config) error {
	l, closeStore, err := newLimiter(cfg)
	if err != nil {
		return err
	}
	defer closeStore()
	out := &reporter{enc: json.NewEncoder(os.Stdout)}
	out.send(message{Ready: true})
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil {
		return fmt.Errorf("worker %d: no start time on stdin: %w", id, err)
	}
	startNanos, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
	if err != nil {
		return fmt.Errorf("worker %d: start time %q: %w", id, line, err)
	}
	start := time.Unix(0, startNanos)
	// Jobs may start until the end of the run: Wait refuses a turn that
	// would come later, at once.
	ctx, cancel := context.WithDeadline(ctx, start.Add(cfg.duration))
	defer cancel()
	time.Sleep(time.Until(start))

	w := &worker{l: l, out: out}
	var wg sync.WaitGroup
	for _, ld := range loads {
		if ld.perSec == 0 {
			for range floodGoroutines {
				wg.Go(func() { w.flood(ctx, ld.tenant) })
			}
			continue
		}
		wg.Go(func() { w.steady(ctx, ld.tenant, ld.perSec/float64(cfg.workers), &wg) })
	}
	wg.Wait()
	out.send(message{Done: true, Failures: w.failures.Load()})
	return nil
}

type worker struct {
	l        *tollgate.Limiter
	out      *reporter
	failures atomic.Int64
}

// flood takes tenant's jobs one after another until the run ends: a
// backlog that only the tenant's budget holds back.
func (w *worker) flood(ctx context.Context, tenant string) {
	for w.job(ctx, tenant) {
	}
}

// steady starts perSec of tenant's jobs a second until the run ends, each
// on a goroutine of its own, as jobs arriving from a queue.
func (w *worker) steady(ctx context.Context, tenant string, perSec float64, wg *sync.WaitGroup) {
	tick := time.NewTicker(time.Duration(float64(time.Second) / perSec))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			wg.Go(func() { w.job(ctx, tenant) })
		}
	}
}

// job waits for tenant's turn, then does the job. It reports false when
// the run is over.
func (w *worker) job(ctx context.Context, tenant string) bool {
	ready := time.Now()
	for {
		d, err := w.l.Wait(ctx, tollgate.Request{Tenant: tenant, Method: "JOB", Route: "sync"})
		switch {
		case err == nil:
			started := time.Now()
			w.out.send(message{Tenant: tenant, Start: started.UnixNano(), Waited: int64(started.Sub(ready)), Delay: int64(d.Delay)})
			time.Sleep(jobTime) // the job itself
			return true
		case ctx.Err() != nil || errors.Is(err, tollgate.ErrWaitExceedsDeadline):
			return false // the run is over, or its turn would come after
		}
		// The store failed (FailClosed): try again shortly.
		w.failures.Add(1)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// A reporter writes messages to the coordinator, one line each.
type reporter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (r *reporter) send(m message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// A coordinator that went away ends the run for this worker too,
	// through the signal it sent.
	_ = r.enc.Encode(m)
}
