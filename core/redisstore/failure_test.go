package redisstore_test

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/redisstore"
)

// slack is what a Take may take beyond its timeout: the time to wake the
// caller, under the race detector on a busy two-core machine.
const slack = 15 * time.Millisecond

// A blackhole is a TCP server that accepts connections and never answers,
// until told to forward new connections to a real Redis.
type blackhole struct {
	l       net.Listener
	forward atomic.Bool
	mu      sync.Mutex
	conns   []net.Conn
}

func newBlackhole(t *testing.T) *blackhole {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{l: l}
	t.Cleanup(func() {
		l.Close()
		b.mu.Lock()
		for _, c := range b.conns {
			c.Close()
		}
		b.mu.Unlock()
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conns = append(b.conns, c)
			b.mu.Unlock()
			if !b.forward.Load() {
				go io.Copy(io.Discard, c) // read everything, answer nothing
				continue
			}
			up, err := net.Dial("tcp", mainRedis)
			if err != nil {
				c.Close()
				continue
			}
			b.mu.Lock()
			b.conns = append(b.conns, up)
			b.mu.Unlock()
			go io.Copy(up, c)
			go io.Copy(c, up)
		}
	}()
	return b
}

// TestUnansweringRedis checks the timeout against a Redis that accepts
// connections and never answers, then the circuit breaker: it opens, fails
// calls at once, probes, and closes when Redis answers again. It runs with
// go-redis's defaults, which ignore context deadlines, and with
// ContextTimeoutEnabled, under which an idle Take makes its own round trip.
func TestUnansweringRedis(t *testing.T) {
	t.Run("default client", func(t *testing.T) { testUnanswering(t, false) })
	t.Run("ContextTimeoutEnabled", func(t *testing.T) { testUnanswering(t, true) })
}

func testUnanswering(t *testing.T, ctxTimeout bool) {
	hole := newBlackhole(t)
	client := redis.NewClient(&redis.Options{Addr: hole.l.Addr().String(), ContextTimeoutEnabled: ctxTimeout})
	defer client.Close()
	const timeout = 50 * time.Millisecond
	const backoff = 300 * time.Millisecond
	s := newStore(t, client, redisstore.WithPrefix(testPrefix(t)),
		redisstore.WithCircuitBreaker(3, backoff))
	limit := tollgate.Limit{Rate: 10, Burst: 10}
	probe := startJitterProbe()
	defer probe.Stop()
	take := func() (time.Duration, error) {
		start := time.Now()
		_, err := s.Take(context.Background(), "tenant", limit, 1)
		return time.Since(start), err
	}
	tooLong := func(d time.Duration) bool { return d > timeout+slack+time.Duration(probe.worst.Load()) }

	for i := range 3 {
		d, err := take()
		if !errors.Is(err, redisstore.ErrUnavailable) || errors.Is(err, redisstore.ErrCircuitOpen) {
			t.Fatalf("call %d: err = %v, want a timeout wrapping ErrUnavailable", i, err)
		}
		if d < timeout-time.Millisecond || tooLong(d) {
			t.Fatalf("call %d took %v, want the %v timeout (the machine wakes goroutines up to %v late)",
				i, d, timeout, time.Duration(probe.worst.Load()))
		}
	}
	// Three failures in a row: the breaker is open.
	opened := time.Now()
	d, err := take()
	if !errors.Is(err, redisstore.ErrCircuitOpen) || !errors.Is(err, redisstore.ErrUnavailable) {
		t.Fatalf("with the breaker open: err = %v, want ErrCircuitOpen", err)
	}
	if d > 2*time.Millisecond+time.Duration(probe.worst.Load()) {
		t.Fatalf("with the breaker open a call took %v, want an immediate answer", d)
	}
	// After the back-off one probe goes out, and fails.
	time.Sleep(backoff - time.Since(opened) + 5*time.Millisecond)
	if d, err := take(); errors.Is(err, redisstore.ErrCircuitOpen) || !errors.Is(err, redisstore.ErrUnavailable) || tooLong(d) {
		t.Fatalf("the probe: %v after %v, want a timeout", err, d)
	}
	if _, err := take(); !errors.Is(err, redisstore.ErrCircuitOpen) {
		t.Fatalf("after a failed probe: %v, want the breaker open again", err)
	}
	// Redis answers again: the next probe closes the breaker.
	hole.forward.Store(true)
	time.Sleep(backoff + 5*time.Millisecond)
	// A generous deadline: these calls dial a new connection.
	for i := range 3 {
		if _, err := s.Take(bg, "tenant", limit, 1); err != nil {
			t.Fatalf("call %d after Redis came back: %v", i, err)
		}
	}
}

// TestRedisKilled kills a Redis under load and restarts it. No call may
// take longer than the timeout and a few milliseconds; the Limiter's
// fallback answers meanwhile; and limits are enforced again within a second
// of Redis's return.
func TestRedisKilled(t *testing.T) {
	srv := startServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.addr()})
	defer client.Close()
	const timeout = 50 * time.Millisecond
	s := newStore(t, client, redisstore.WithPrefix(testPrefix(t)))
	plan := tollgate.Plan{Name: "p", Limit: tollgate.Limit{Rate: 200, Burst: 20}}
	l, err := tollgate.New(s, tollgate.SinglePlan(plan), tollgate.WithLogger(nil),
		tollgate.WithFallbackStore(redisstore.DividedStore{Store: memory.New(), Replicas: 2}))
	if err != nil {
		t.Fatal(err)
	}

	type sample struct {
		at, took time.Duration
		err      error
		allowed  bool
		degraded bool
		store    bool // a direct store call rather than a Limiter decision
		tenant   int
	}
	var mu sync.Mutex
	var samples []sample
	probe := startJitterProbe()
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local []sample
			defer func() { mu.Lock(); samples = append(samples, local...); mu.Unlock() }()
			tenant := w % 4
			for {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				sm := sample{at: t0.Sub(start), tenant: tenant, store: w < 4}
				if sm.store {
					r, err := s.Take(context.Background(), "tenant-"+strconv.Itoa(tenant), plan.Limit, 1)
					sm.err, sm.allowed = err, r.Allowed
				} else {
					d, err := l.Take(context.Background(), tollgate.Request{Tenant: "tenant-" + strconv.Itoa(tenant)})
					sm.err, sm.allowed, sm.degraded = err, d.Allowed, d.Degraded
				}
				sm.took = time.Since(t0)
				local = append(local, sm)
				time.Sleep(200 * time.Microsecond) // about 5,000 calls a second each at most
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	down := time.Since(start)
	srv.kill()
	time.Sleep(1 * time.Second)
	restart := time.Since(start)
	srv.start()
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()
	jitter := probe.Stop()
	slices.SortFunc(samples, func(a, b sample) int { return int(a.at - b.at) })

	var worst time.Duration
	var storeErrs, circuitOpen, degraded int
	recovered := time.Duration(-1)
	for _, sm := range samples {
		worst = max(worst, sm.took)
		switch {
		case sm.store && sm.err != nil:
			if !errors.Is(sm.err, redisstore.ErrUnavailable) {
				t.Fatalf("at %v: store error %v does not wrap ErrUnavailable", sm.at, sm.err)
			}
			storeErrs++
			if errors.Is(sm.err, redisstore.ErrCircuitOpen) {
				circuitOpen++
			}
		case !sm.store && sm.err != nil:
			t.Fatalf("at %v: Limiter error %v", sm.at, sm.err)
		case !sm.store && sm.degraded:
			degraded++
			if sm.at+sm.took < down {
				t.Fatalf("at %v: degraded decision before Redis was killed", sm.at)
			}
		case sm.store && sm.allowed && sm.at > restart && recovered < 0:
			recovered = sm.at
		}
	}
	t.Logf("%d calls; killed at %v, restarted at %v, Redis decided again at %v; slowest call %v "+
		"(goroutine wake-ups up to %v late); %d store errors (%d with the breaker open), %d degraded Limiter decisions",
		len(samples), down.Round(time.Millisecond), restart.Round(time.Millisecond), recovered.Round(time.Millisecond),
		worst, jitter, storeErrs, circuitOpen, degraded)
	if worst > timeout+slack+jitter {
		t.Fatalf("a call took %v; the timeout is %v and the machine wakes goroutines up to %v late", worst, timeout, jitter)
	}
	if storeErrs == 0 || circuitOpen == 0 || degraded == 0 {
		t.Fatalf("the outage went unnoticed: %d errors, %d with the breaker open, %d degraded decisions",
			storeErrs, circuitOpen, degraded)
	}
	if recovered < 0 || recovered-restart > time.Second {
		t.Fatalf("Redis restarted at %v but decided again only at %v", restart, recovered)
	}
	// From then on the limit holds again: per tenant, no more than Burst +
	// Rate x elapsed, and denials once the burst is spent.
	for tenant := range 4 {
		var allowed, denied int
		for _, sm := range samples {
			if sm.at >= recovered && sm.tenant == tenant && sm.err == nil && !sm.degraded {
				if sm.allowed {
					allowed++
				} else {
					denied++
				}
			}
		}
		ceiling := float64(plan.Limit.Burst) + plan.Limit.Rate*(time.Since(start)-recovered).Seconds()
		if float64(allowed) > ceiling || denied == 0 {
			t.Fatalf("tenant %d after recovery: %d allowed (ceiling %.0f), %d denied", tenant, allowed, ceiling, denied)
		}
	}
}

// TestScriptFlush empties the script cache every 100ms under load: callers
// must never see it.
func TestScriptFlush(t *testing.T) {
	srv := startServer(t)
	var clients []*redis.Client
	hook := &countHook{}
	for range 2 {
		c := redis.NewClient(&redis.Options{Addr: srv.addr()})
		c.AddHook(hook)
		defer c.Close()
		clients = append(clients, c)
	}
	admin := redis.NewClient(&redis.Options{Addr: srv.addr()})
	defer admin.Close()
	prefix := testPrefix(t)
	limit := tollgate.Limit{Rate: 1e5, Burst: 1e5} // never denies: every Take reaches Redis
	var takes, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 16 {
		s := newStore(t, clients[w%2], redisstore.WithPrefix(prefix))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_, err := s.Take(bg, "tenant-"+strconv.Itoa((w+i)%20), limit, 1)
				takes.Add(1)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	flushes := 0
	for range 20 {
		time.Sleep(100 * time.Millisecond)
		if err := admin.ScriptFlush(bg).Err(); err != nil {
			t.Fatal(err)
		}
		flushes++
	}
	close(stop)
	wg.Wait()
	t.Logf("%d Takes, %d SCRIPT FLUSHes, %d scripts sent again in full", takes.Load(), flushes, hook.evals.Load())
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d Takes failed, the first with %v", n, takes.Load(), firstErr.Load())
	}
	if hook.evals.Load() == 0 {
		t.Fatal("the script cache was never found empty: the test tested nothing")
	}
}
