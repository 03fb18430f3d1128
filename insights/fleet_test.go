package insights_test

import (
	"context"
	"os"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core/redistest"
	"github.com/tollgate-go/tollgate/insights"
	"github.com/tollgate-go/tollgate/insights/redisexchange"
)

func TestMain(m *testing.M) { os.Exit(redistest.Run(m)) }

// newExchange returns an exchange on the tests' shared Redis (a throwaway
// redis-server, or the one TOLLGATE_TEST_REDIS names) under a prefix of the
// test's own, whose keys are deleted when the test ends.
func newExchange(t *testing.T) (*redisexchange.Exchange, *redis.Client, string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: redistest.Shared(t)})
	t.Cleanup(func() { c.Close() })
	prefix := redistest.Prefix(t) // its clean-up runs after the trackers' last publication
	x, err := redisexchange.New(c, redisexchange.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	return x, c, prefix
}

func scanKeys(t *testing.T, c *redis.Client, prefix string) []string {
	t.Helper()
	var keys []string
	it := c.Scan(context.Background(), 0, prefix+"*", 1000).Iterator()
	for it.Next(context.Background()) {
		keys = append(keys, it.Val())
	}
	if err := it.Err(); err != nil {
		t.Fatalf("SCAN: %v", err)
	}
	return keys
}

// sameCandidates fails unless a and b list the same candidates, fleet-wide.
func sameCandidates(t *testing.T, w insights.Window, a, b insights.Report) {
	t.Helper()
	if !a.Fleet || !b.Fleet || a.FleetError != "" || b.FleetError != "" {
		t.Fatalf("%s: fleet %v/%v, errors %q / %q", w, a.Fleet, b.Fleet, a.FleetError, b.FleetError)
	}
	if !reflect.DeepEqual(a.Candidates, b.Candidates) || !reflect.DeepEqual(a.Replicas, b.Replicas) || a.ThrottledTokens != b.ThrottledTokens {
		t.Fatalf("%s: the replicas disagree:\n a %+v\n b %+v", w, a, b)
	}
}

func TestTwoReplicasShowTheSameCandidates(t *testing.T) {
	x, client, prefix := newExchange(t)
	c := newClock(monday)
	// Publication is left to the reads and to explicit flushes: the
	// background one is an hour away.
	a := newTracker(t, c, insights.WithExchange(x, "replica-a"), insights.WithFlushInterval(time.Hour))
	b := newTracker(t, c, insights.WithExchange(x, "replica-b"), insights.WithFlushInterval(time.Hour))
	la, lb := newLimiter(t, c, a), newLimiter(t, c, b)

	flood(t, lb, "initech", "/api/hello", 1, 104) // b: startup, 4 over its burst
	flood(t, la, "acme", "/api/hello", 1, 50)     // a: enterprise, well within
	loopy := flood(t, la, "loopy", "/api/hello", 1, 300)
	c.add(time.Second)
	loopy.throttled += flood(t, la, "loopy", "/api/hello", 1, 100).throttled

	_ = candidates(t, a, insights.LastHour)   // publishes a's counts
	rb := candidates(t, b, insights.LastHour) // publishes b's, reads both
	ra := candidates(t, a, insights.LastHour) // now with b's too
	sameCandidates(t, insights.LastHour, ra, rb)
	if got := rb.Replicas; !reflect.DeepEqual(got, []string{"replica-a", "replica-b"}) {
		t.Fatalf("replicas %v", got)
	}
	if len(rb.Candidates) != 2 || rb.Candidates[0].Tenant != "loopy" || rb.Candidates[0].ThrottledRequests != loopy.throttled ||
		rb.Candidates[0].Plan != "free" || rb.Candidates[1].Tenant != "initech" {
		t.Fatalf("b, which never saw loopy, lists %+v", rb.Candidates)
	}

	// An hour and more later, more floods on a; b still agrees, in every
	// window, reading some buckets from its cache of finished ones.
	for range 3 {
		c.add(70 * time.Minute)
		flood(t, la, "loopy", "/api/reports", 1, 30)
		flood(t, lb, "globex", "/api/hello", 1, 10)
	}
	for _, w := range insights.Windows {
		if err := a.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		rb := candidates(t, b, w)
		ra := candidates(t, a, w)
		sameCandidates(t, w, ra, rb)
		if rb.Candidates[0].Tenant != "loopy" {
			t.Fatalf("%s: first is %s", w, rb.Candidates[0].Tenant)
		}
	}

	// Redis holds one hash per bucket, each with a field per replica that
	// counted in it and a TTL.
	keys := scanKeys(t, client, prefix)
	if len(keys) == 0 || len(keys) > 3*(4+1) {
		t.Fatalf("%d keys: %v", len(keys), keys)
	}
	for _, k := range keys {
		ttl := client.PTTL(context.Background(), k).Val()
		if ttl <= 0 || ttl > 31*6*time.Hour {
			t.Fatalf("%s: TTL %v", k, ttl)
		}
		if n := client.HLen(context.Background(), k).Val(); n < 1 || n > 2 {
			t.Fatalf("%s: %d fields", k, n)
		}
	}
}

// countingExchange counts the buckets a Tracker asks for.
type countingExchange struct {
	insights.Exchange
	asked atomic.Int64
}

func (c *countingExchange) Collect(ctx context.Context, buckets []string) ([]map[string][]byte, error) {
	c.asked.Add(int64(len(buckets)))
	return c.Exchange.Collect(ctx, buckets)
}

func TestFinishedBucketsAreReadOnce(t *testing.T) {
	x, _, _ := newExchange(t)
	cx := &countingExchange{Exchange: x}
	c := newClock(monday)
	a := newTracker(t, c, insights.WithExchange(cx, "a"), insights.WithFlushInterval(time.Minute))
	b := newTracker(t, c, insights.WithExchange(x, "b"), insights.WithFlushInterval(time.Minute))
	la, lb := newLimiter(t, c, a), newLimiter(t, c, b)
	for range 24 {
		flood(t, la, "loopy", "/api/hello", 1, 30)
		flood(t, lb, "initech", "/api/hello", 1, 110)
		c.add(time.Hour)
		if err := b.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	first := candidates(t, a, insights.LastDay)
	cx.asked.Store(0)
	again := candidates(t, a, insights.LastDay)
	// Every hour but the last two is finished (its end more than two
	// flush intervals and 30 s ago): only those are read again.
	if n := cx.asked.Load(); n != 2 {
		t.Fatalf("the second read asked for %d buckets, want 2", n)
	}
	sameCandidates(t, insights.LastDay, first, again)
	if len(again.Candidates) != 2 || again.Candidates[0].ThrottledRequests < 24*9 {
		t.Fatalf("%+v", again.Candidates)
	}
}

func TestFleetReadFallsBackToTheReplica(t *testing.T) {
	// Nothing listens on port 1 of the loopback address.
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer dead.Close()
	x, err := redisexchange.New(dead)
	if err != nil {
		t.Fatal(err)
	}
	c := newClock(monday)
	tr := newTracker(t, c, insights.WithExchange(x, "lonely"), insights.WithFlushInterval(time.Hour))
	flood(t, newLimiter(t, c, tr), "loopy", "/api/hello", 1, 50)
	rep := candidates(t, tr, insights.LastHour)
	if rep.Fleet || rep.Stale || !strings.Contains(rep.FleetError, "reading the exchange") || len(rep.Candidates) != 1 || rep.Candidates[0].Tenant != "loopy" {
		t.Fatalf("with Redis down: %+v", rep)
	}
}

func TestAReplicaOfAnotherVersionIsLeftOut(t *testing.T) {
	x, client, prefix := newExchange(t)
	c := newClock(monday)
	a := newTracker(t, c, insights.WithExchange(x, "a"), insights.WithFlushInterval(time.Hour))
	flood(t, newLimiter(t, c, a), "loopy", "/api/hello", 1, 50)
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A summary that is not one, under every bucket a wrote.
	for _, k := range scanKeys(t, client, prefix) {
		client.HSet(context.Background(), k, "z-newer", "TGI2 something else")
	}
	rep := candidates(t, a, insights.LastHour)
	if !rep.Fleet || len(rep.Candidates) != 1 || !reflect.DeepEqual(rep.Replicas, []string{"a"}) {
		t.Fatalf("%+v", rep)
	}
}

func TestRedisExchangeRoundTrip(t *testing.T) {
	x, client, prefix := newExchange(t)
	ctx := context.Background()
	err := x.Publish(ctx, "r1", []insights.BucketSummary{{Bucket: "300s:0", Data: []byte("one"), TTL: time.Minute}, {Bucket: "300s:300", Data: []byte{0, 1, 2}, TTL: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Publish(ctx, "r2", []insights.BucketSummary{{Bucket: "300s:0", Data: []byte("two"), TTL: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	if err := x.Publish(ctx, "r1", []insights.BucketSummary{{Bucket: "300s:0", Data: []byte("one again"), TTL: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	got, err := x.Collect(ctx, []string{"300s:0", "300s:300", "300s:600"})
	if err != nil {
		t.Fatal(err)
	}
	want := []map[string][]byte{{"r1": []byte("one again"), "r2": []byte("two")}, {"r1": {0, 1, 2}}, {}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("collected %q, want %q", got, want)
	}
	if ttl := client.PTTL(ctx, prefix+"300s:300").Val(); ttl <= 59*time.Minute || ttl > time.Hour {
		t.Fatalf("TTL %v", ttl)
	}
	if x.Key("b") != prefix+"b" {
		t.Fatal(x.Key("b"))
	}
	if _, err := redisexchange.New(nil); err == nil {
		t.Fatal("a nil client was accepted")
	}
	if _, err := redisexchange.New(client, redisexchange.WithPrefix("")); err == nil || !strings.Contains(err.Error(), "WithPrefix") {
		t.Fatalf("empty prefix: %v", err)
	}
}
