package redisstore_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/core/redistest"
	"github.com/tollgate-go/tollgate/core/storekit"
)

func TestMain(m *testing.M) {
	// go-redis logs every failed dial; the fault tests make many on purpose.
	redis.SetLogger(quiet{})
	os.Exit(redistest.Run(m))
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// sharedClient returns a client of the Redis the tests share.
func sharedClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: redistest.Shared(t)})
	t.Cleanup(func() { c.Close() })
	return c
}

// newStore returns a Store on client with keys under the test's own
// prefix (deleted when the test ends) and no logger, and the options.
func newStore(t testing.TB, client redis.UniversalClient, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	opts = append([]redisstore.Option{redisstore.WithPrefix(redistest.Prefix(t)), redisstore.WithLogger(nil)}, opts...)
	s, err := redisstore.New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// day is a UTC daily quota period.
func day(t time.Time) (time.Time, time.Time) {
	start := t.UTC().Truncate(24 * time.Hour)
	return start, start.Add(24 * time.Hour)
}

func bucket(name string, rate float64, burst int64) storekit.Rule {
	r := storekit.BucketRule(rate, burst)
	r.Name = name
	return r
}

func quota(name string, tokens int64, period func(time.Time) (time.Time, time.Time)) storekit.Rule {
	return storekit.Rule{Kind: storekit.Quota, Name: name, Burst: tokens, Period: period}
}

// do applies op through s and fails the test on an error.
func do(t testing.TB, s *redisstore.Store, op *storekit.Op) {
	t.Helper()
	if err := s.Do(context.Background(), op); err != nil {
		t.Fatalf("%v of %q: %v", op.Kind, op.Tenant, err)
	}
}

// long skips a scenario that takes seconds under -short: make test runs
// the quick tests, make check (CI) every one.
func long(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("a long scenario: make check runs it")
	}
}
