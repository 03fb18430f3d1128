package redisstore_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/core/redistest"
	"github.com/tollgate-go/tollgate/core/storekit"
	"github.com/tollgate-go/tollgate/core/storetest"
)

// patientTimeout is the timeout of the Stores of the conformance kit's
// checks: a Redis call that a loaded machine (the race detector, other
// tests) delays past the default 50 ms fails, and a decision test must not
// fail for it. A Take whose answer never came may hold a slot that no one
// releases until its lease ends, which the kit's clock never reaches.
const patientTimeout = 2 * time.Second

// replicaStores returns four Stores on the shared Redis, each with a
// client of its own, as replicas of a service have, under the test's
// prefix.
func replicaStores(t *testing.T, opts ...redisstore.Option) []tollgate.Store {
	t.Helper()
	addr, prefix := redistest.Shared(t), redistest.Prefix(t)
	var stores []tollgate.Store
	for range 4 {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { c.Close() })
		s, err := redisstore.New(c, append([]redisstore.Option{redisstore.WithPrefix(prefix), redisstore.WithLogger(nil)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	return stores
}

// TestInFlightReplicas: 64 goroutines on four replicas that share one
// Redis make requests of one tenant with a cap of 5 in flight, 20,000 of
// them granted, some cancelled at any moment or panicking: never more than
// 5 run at once, and no slot is left taken.
func TestInFlightReplicas(t *testing.T) {
	long(t)
	// On a test clock, it runs beside TestKilledReplicaFreesSlots, which
	// waits.
	t.Parallel()
	clock := storetest.NewClock()
	stores := replicaStores(t, redisstore.WithTestClock(clock.Now), redisstore.WithTimeout(patientTimeout))
	storetest.RunInFlight(t, stores, clock, 20_000)
}

// inFlightPlan lets a tenant run 5 requests at once, at any rate.
var inFlightPlan = tollgate.Plan{Name: "slow", Limit: tollgate.Limit{Rate: 1000, Burst: 1000},
	Policies: []tollgate.Policy{{InFlight: 5}}}

// lease is the Limiter's lease of a slot, as documented: it renews it
// every third of that while the request runs.
const lease = 10 * time.Second

func inFlightRule(name string, burst int64) storekit.Rule {
	return storekit.Rule{Kind: storekit.InFlight, Name: name, Burst: burst}
}

// TestInFlightKeys: a cap's leases live in a sorted set beside the hash,
// scored by their expiry, which expires when its last lease does; a Reset
// leaves it, the last Release deletes it; a set of another type fails the
// Op, which then takes nothing.
func TestInFlightKeys(t *testing.T) {
	client := sharedClient(t)
	s := newStore(t, client)
	ctx := context.Background()
	rules := []storekit.Rule{bucket("", 1, 10), inFlightRule("inflight", 2)}
	hash, set := s.Key("t"), s.Key("t")+":f:inflight"
	op := func(kind storekit.Kind, lease string) *storekit.Op {
		o := &storekit.Op{Kind: kind, Tenant: "t", Rules: rules, Cost: 1, Lease: lease, LeaseTTL: 10 * time.Second}
		do(t, s, o)
		return o
	}
	op(storekit.Take, "a")
	now, err := client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	score := client.ZScore(ctx, set, "a").Val()
	if d := time.UnixMicro(int64(score)).Sub(now); d <= 9*time.Second || d > 10*time.Second {
		t.Fatalf("lease a expires %v from now, want 10s", d)
	}
	if ttl := client.PTTL(ctx, set).Val(); ttl <= 10*time.Second || ttl > 11*time.Second {
		t.Fatalf("the set's TTL is %v, want its last lease's 10s and a second", ttl)
	}
	op(storekit.Renew, "a")
	if got := client.ZScore(ctx, set, "a").Val(); got < score {
		t.Fatalf("a Renew moved the lease from %v to %v", score, got)
	}
	op(storekit.Reset, "")
	if client.Exists(ctx, hash).Val() != 0 || client.ZCard(ctx, set).Val() != 1 {
		t.Fatalf("after a Reset: hash %d, %d leases; want the hash gone and the lease kept",
			client.Exists(ctx, hash).Val(), client.ZCard(ctx, set).Val())
	}
	op(storekit.Release, "a")
	if client.Exists(ctx, set).Val() != 0 {
		t.Fatal("the set of leases outlived its last lease")
	}

	client.Set(ctx, set, "not a set", 0)
	err = s.Do(ctx, &storekit.Op{Kind: storekit.Take, Tenant: "t", Rules: rules, Cost: 1, Lease: "b", LeaseTTL: time.Second})
	if !errors.Is(err, storekit.ErrMisconfigured) {
		t.Fatalf("a Take whose set holds another type: %v, want ErrMisconfigured", err)
	}
	if client.Exists(ctx, hash).Val() != 0 || client.Get(ctx, set).Val() != "not a set" {
		t.Fatal("the failed Take wrote")
	}
}

// TestReleaseOfACallerGone: a Release whose caller's context has ended
// returns at once, and still gives the slot back.
func TestReleaseOfACallerGone(t *testing.T) {
	l := limiter(t, newStore(t, sharedClient(t)), inFlightPlan)
	ctx, cancel := context.WithCancel(context.Background())
	var held []tollgate.Decision
	for range 5 {
		held = append(held, take(t, l, ctx, "t", true))
	}
	take(t, l, ctx, "t", false)
	cancel()
	for i := range held {
		if err := l.Release(ctx, &held[i]); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Release after the caller left: %v", err)
		}
	}
	eventually(t, "the slots released", func() bool {
		d, err := l.Inspect(context.Background(), "t")
		return err == nil && d.Results()[1].Remaining == 5
	})
}

// TestOrphanedSlotReleased: a Take whose caller gives up once it has gone
// to Redis may be granted a slot that nobody holds: the Store releases it
// as soon as Redis's answer comes.
func TestOrphanedSlotReleased(t *testing.T) {
	client := sharedClient(t)
	proxy := redistest.NewProxy(t, redistest.Shared(t))
	slow := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { slow.Close() })
	s := newStore(t, slow, redisstore.WithTimeout(2*time.Second))
	if err := s.Do(context.Background(), &storekit.Op{Kind: storekit.Check}); err != nil {
		t.Fatal(err)
	}
	proxy.SetLatency(0, 200*time.Millisecond) // every answer late
	set := s.Key("t") + ":f:inflight"
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	op := &storekit.Op{Kind: storekit.Take, Tenant: "t", Rules: []storekit.Rule{inFlightRule("inflight", 1)}, Cost: 1,
		Lease: "orphan", LeaseTTL: time.Minute}
	if err := s.Do(ctx, op); !errors.Is(err, redisstore.ErrUnavailable) {
		t.Fatalf("a Take whose caller gave up: %v, want ErrUnavailable", err)
	}
	eventually(t, "the orphan's slot taken", func() bool { return client.ZScore(context.Background(), set, "orphan").Err() == nil })
	start := time.Now()
	eventually(t, "the orphan's slot released", func() bool { return client.Exists(context.Background(), set).Val() == 0 })
	t.Logf("the orphaned slot was released %v after it was seen taken, with every answer 200 ms late", time.Since(start))
}

// eventually waits up to 5 s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// limiter returns a Limiter over s that gives every tenant plan.
func limiter(t testing.TB, s tollgate.Store, plan tollgate.Plan) *tollgate.Limiter {
	t.Helper()
	l, err := tollgate.New(s, tollgate.SinglePlan(plan), tollgate.WithLogger(nil), tollgate.WithFailClosed(true))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// take decides a request of tenant through l and checks it is allowed,
// or denied, without a failure.
func take(t testing.TB, l *tollgate.Limiter, ctx context.Context, tenant string, allowed bool) tollgate.Decision {
	t.Helper()
	d, err := l.Take(ctx, tollgate.Request{Tenant: tenant})
	if err != nil || d.Degraded || d.Allowed != allowed {
		t.Fatalf("Take of %q: allowed %v (%+v, %v, %v), want %v", tenant, d.Allowed, d.Results(), d.Err, err, allowed)
	}
	return d
}

// TestInFlightRoundTrips: an in-flight policy adds no round trip to a
// decision: a Take is one call of the script either way, and one request
// at a time goes in a round trip of its own; the Release when the request
// ends is one more. Redis's slow log, set to log every command, counts
// the calls (a script's own commands are not in it).
func TestInFlightRoundTrips(t *testing.T) {
	srv := redistest.Start(t, "--slowlog-log-slower-than", "0", "--slowlog-max-len", "1000")
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { client.Close() })
	sum := sha1.Sum([]byte(redisstore.ScriptSource))
	sha := hex.EncodeToString(sum[:])
	s := newStore(t, client)
	ctx := context.Background()
	calls := func() int {
		logged, err := client.SlowLogGet(ctx, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, l := range logged {
			if len(l.Args) > 1 && strings.EqualFold(l.Args[0], "evalsha") && l.Args[1] == sha {
				n++
			}
		}
		return n
	}
	rated := tollgate.Plan{Name: "rated", Limit: inFlightPlan.Limit}
	for _, plan := range []tollgate.Plan{rated, inFlightPlan} {
		l := limiter(t, s, plan)
		for i := range 3 {
			if err := errors.Join(client.SlowLogReset(ctx).Err(), client.ConfigResetStat(ctx).Err()); err != nil {
				t.Fatal(err)
			}
			d := take(t, l, ctx, plan.Name, true)
			decision := calls()
			if err := l.Release(ctx, &d); err != nil {
				t.Fatal(err)
			}
			both := calls()
			if i == 0 {
				t.Logf("%s: Take %d call(s) of the script, Take and Release %d; in them Redis ran %s",
					plan.Name, decision, both, commands(client.Info(ctx, "commandstats").Val()))
			}
			want := 1
			if plan.Policies != nil {
				want = 2
			}
			if decision != 1 || both != want {
				t.Fatalf("%s: a Take made %d calls of the script, Take and Release %d; want 1 and %d", plan.Name, decision, both, want)
			}
		}
	}
}

// commands lists the calls of each command in INFO commandstats.
func commands(info string) string {
	var out []string
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok || name == "config|resetstat" || name == "slowlog|get" || name == "slowlog|reset" || name == "info" {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		out = append(out, name+" "+calls)
	}
	return strings.Join(out, ", ")
}
