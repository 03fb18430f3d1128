package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/core/redistest"
	"github.com/tollgate-go/tollgate/core/storekit"
	"github.com/tollgate-go/tollgate/core/storetest"
)

const year = 365 * 24 * time.Hour

// TestExtremes: the largest bursts, the longest windows and reservations
// the engine allows, where the script's doubles run out of room first.
func TestExtremes(t *testing.T) {
	client := sharedClient(t)
	const maxBurst = 999_999_999_999_999
	huge := bucket("", float64(maxBurst)/(100*year).Seconds(), maxBurst) // a hundred years to refill
	slow := bucket("r:slow", 1/(100*year).Seconds(), 1)                  // one token a century
	fast := bucket("r:fast", 1e6, maxBurst/1e6*1e6)
	q := quota("day", maxBurst, day)
	take := func(tenant string, cost int64, delay time.Duration, rules ...storekit.Rule) step {
		return step{op: storekit.Op{Kind: storekit.Take, Tenant: tenant, Rules: rules, Cost: cost, MaxDelay: delay}}
	}
	steps := []step{
		take("a", maxBurst, 0, huge),
		take("a", 1, 0, huge),
		take("a", maxBurst, 100*year, huge), // reserved a hundred years ahead
		take("a", 1, 100*year, huge),        // past it: denied
		{advance: 50 * year, op: take("a", 3, 0, huge).op},
		take("b", 1, 0, slow),
		take("b", 1, 100*year, slow),
		take("b", 1, 100*year, slow),
		{advance: year, op: take("b", 1, 100*year, slow).op},
		take("c", maxBurst/1e6*1e6, 0, fast),
		take("c", 7, 0, fast),
		take("d", maxBurst, 0, q),
		take("d", 1, 0, q),
		{op: storekit.Op{Kind: storekit.Inspect, Tenant: "a", Rules: []storekit.Rule{huge}, Cost: 1}},
		{op: storekit.Op{Kind: storekit.Cancel, Tenant: "a", Rules: []storekit.Rule{huge}, Cost: maxBurst}, cancels: 2},
		{op: storekit.Op{Kind: storekit.Inspect, Tenant: "a", Rules: []storekit.Rule{huge}, Cost: 1}},
	}
	compareWithModel(t, client, steps)
}

// TestResetForgetsEveryRule: a Reset that names only the main bucket
// forgets every rule the tenant has or had, budgets and quotas included.
func TestResetForgetsEveryRule(t *testing.T) {
	client := sharedClient(t)
	s := newStore(t, client)
	all := []storekit.Rule{bucket("", 1, 5), bucket("b:reports", 1, 2), quota("day", 3, day), quota("b:old:day", 3, day)}
	do(t, s, &storekit.Op{Kind: storekit.Take, Tenant: "t", Rules: all, Cost: 2})
	do(t, s, &storekit.Op{Kind: storekit.Reset, Tenant: "t", Rules: all[:1], Cost: 1})
	if n := client.Exists(context.Background(), s.Key("t")).Val(); n != 0 {
		t.Fatalf("the tenant's key survived a Reset")
	}
	op := storekit.Op{Kind: storekit.Inspect, Tenant: "t", Rules: all, Cost: 1}
	do(t, s, &op)
	for i, r := range op.Results {
		if r.Remaining != all[i].Burst || r.ResetAfter != 0 {
			t.Errorf("rule %q after Reset: %+v, want full", all[i].Name, r)
		}
	}
}

// TestPlanChangeAcrossTimeZones: a tenant whose daily quota moves to a
// calendar in another time zone keeps what it used until the period it
// counted in ends.
func TestPlanChangeAcrossTimeZones(t *testing.T) {
	client := sharedClient(t)
	clock := storetest.NewClockAt(time.Date(2026, 6, 1, 20, 0, 0, 0, time.UTC)) // 05:00 the next day in Tokyo
	s := newStore(t, client, redisstore.WithTestClock(clock.Now))
	utc := quota("day", 200, tollgate.Quota{Tokens: 200, Period: tollgate.Daily}.Bounds)
	tokyo := quota("day", 200, tollgate.Quota{Tokens: 200, Period: tollgate.Daily, Location: mustLoad("Asia/Tokyo")}.Bounds)
	for range 150 {
		do(t, s, &storekit.Op{Kind: storekit.Take, Tenant: "t", Rules: []storekit.Rule{utc}, Cost: 1})
	}
	op := storekit.Op{Kind: storekit.Take, Tenant: "t", Rules: []storekit.Rule{tokyo}, Cost: 60}
	do(t, s, &op)
	if op.Allowed || op.Results[0].Remaining != 50 || op.Results[0].RetryAfter != 4*time.Hour {
		t.Fatalf("60 more under the Tokyo calendar: %+v %+v; want denied, 50 left until the UTC day ends in 4h", op, op.Results)
	}
	clock.Advance(4 * time.Hour) // the UTC day is over: the Tokyo day has 15 hours to go
	op = storekit.Op{Kind: storekit.Take, Tenant: "t", Rules: []storekit.Rule{tokyo}, Cost: 60}
	do(t, s, &op)
	if !op.Allowed || op.Results[0].Remaining != 140 || op.Results[0].ResetAfter != 15*time.Hour {
		t.Fatalf("after the UTC day: %+v %+v; want allowed, 140 left, reset with the Tokyo day in 15h", op, op.Results)
	}
}

// TestQuotaPeriodFromRedisClock: the process's clock is a day and a half
// off; the script refuses the quota periods it computes, and the Store
// computes them again at Redis's time, for the first call and the next.
func TestQuotaPeriodFromRedisClock(t *testing.T) {
	client := sharedClient(t)
	s := newStore(t, client, redisstore.WithProcessClock(func() time.Time { return time.Now().Add(-36 * time.Hour) }))
	q := quota("day", 5, day)
	for i := range 2 {
		op := storekit.Op{Kind: storekit.Take, Tenant: "t", Rules: []storekit.Rule{q}, Cost: 1}
		do(t, s, &op)
		redisNow := time.UnixMicro(op.Mark)
		_, end := day(redisNow)
		if got, want := op.Results[0].ResetAfter, end.Sub(redisNow); !op.Allowed || op.Results[0].Remaining != int64(4-i) || got != want {
			t.Fatalf("take %d: %+v %+v; want allowed, %d left, reset after %v (the end of Redis's day)", i, op, op.Results, 4-i, want)
		}
	}
}

// TestHostileTenants: tenant IDs that look like hash tags, hashed IDs,
// separators, control bytes and long ones each get a key of their own,
// under the prefix, with a hash tag that the store chose.
func TestHostileTenants(t *testing.T) {
	client := sharedClient(t)
	s := newStore(t, client)
	ids := []string{"", "{", "}", "{}", "a{b}c", "{victim}", "#", "#abc", "victim", "vic\x00tim", "tenant\r\n",
		"ü", "\xff\xfe", " ", strings.Repeat("x", redisstore.MaxRawTenant), strings.Repeat("x", redisstore.MaxRawTenant+1),
		strings.Repeat("{", 5000)}
	keys := map[string]string{}
	for _, id := range ids {
		k := s.Key(id)
		if prev, dup := keys[k]; dup {
			t.Fatalf("tenants %q and %q share the key %q", prev, id, k)
		}
		keys[k] = id
		prefix := strings.TrimSuffix(k, k[strings.IndexByte(k, '{'):])
		tag := k[len(prefix):]
		if strings.Count(tag, "{") != 1 || strings.Count(tag, "}") != 1 || tag[0] != '{' || tag[len(tag)-1] != '}' {
			t.Errorf("tenant %q has key %q: its tag is not the store's", id, k)
		}
		if len(k) > len(prefix)+2+redisstore.MaxRawTenant {
			t.Errorf("tenant %q has a key of %d bytes", id, len(k))
		}
	}
	// Each takes from its own bucket of one token.
	lim := tollgate.Limit{Rate: 1e-3, Burst: 1}
	for _, id := range ids {
		if r, err := s.Take(context.Background(), id, lim, 1); err != nil || !r.Allowed {
			t.Fatalf("first take of tenant %q: %+v, %v", id, r, err)
		}
	}
	for _, id := range ids {
		if r, _ := s.Take(context.Background(), id, lim, 1); r.Allowed {
			t.Errorf("second take of tenant %q allowed: it shares a bucket", id)
		}
	}
}

// TestInvalidState: fields that hold no valid state are counted as empty,
// removed and logged, and the decision is made on the empty state.
func TestInvalidState(t *testing.T) {
	client := sharedClient(t)
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	s := newStore(t, client, redisstore.WithLogger(logger))
	ctx := context.Background()
	rules := []storekit.Rule{bucket("", 1, 5), quota("day", 5, day)}
	for _, bad := range [][2]string{
		{"garbage", "garbage"},
		{"-5", "-1:1767225600.000000"},
		{"99999999999999999999.000000", "3"},
		{"1767225600.5", "3:"},
		{"9999999999.000000", "1000000000000000:1767225600.000000"}, // centuries ahead; more than any quota holds
		{"1e15", "3:9999999999.000000"},
	} {
		key := s.Key("t")
		client.HSet(ctx, key, "", bad[0], "day", bad[1])
		logs.Reset()
		op := storekit.Op{Kind: storekit.Take, Tenant: "t", Rules: rules, Cost: 1}
		do(t, s, &op)
		if !op.Allowed || op.Results[0].Remaining != 4 || op.Results[1].Remaining != 4 {
			t.Errorf("state %q: %+v %+v; want taken from a full bucket and an unused quota", bad, op.Allowed, op.Results)
		}
		if n := strings.Count(logs.String(), "not valid"); n != 2 {
			t.Errorf("state %q: logged %d repairs, want 2:\n%s", bad, n, logs.String())
		}
		client.Del(ctx, key)
	}
}

// FuzzStoredState: whatever a tenant's hash holds where its token bucket
// and its quota are kept, an Inspect and two Takes succeed with figures
// within the rules' bounds, and each leaves every field empty or holding a
// state of its kind: the Inspect, which writes nothing, by removing what
// is not one.
func FuzzStoredState(f *testing.F) {
	for _, seed := range [][2]string{
		{"1767225600.000000", "3:1767225600.000000"},
		{"garbage", "garbage"},
		{"99999999999999999999.000000", "3"},
		{"9999999999.000000", "1000000000000000:1767225600.000000"},
		{"000000000001.999999", "999999999999999:9999999999.999999"},
		{"", ":"},
		{"5000000000.000000", "999:5000000000.000000"}, // a century ahead: valid, and far over
	} {
		f.Add(seed[0], seed[1])
	}
	client := sharedClient(f)
	s := newStore(f, client)
	key := s.Key("t")
	rules := []storekit.Rule{bucket("", 1, 5), quota("day", 5, day)}
	kept := map[string]*regexp.Regexp{
		"":         regexp.MustCompile(`^[0-9]+\.[0-9]{6}$`),
		"day":      regexp.MustCompile(`^[0-9]+:[0-9]+\.[0-9]{6}$`),
		"~expires": regexp.MustCompile(`^[0-9]+$`),
	}
	f.Fuzz(func(t *testing.T, tat, used string) {
		ctx := context.Background()
		if err := client.HSet(ctx, key, "", tat, "day", used).Err(); err != nil {
			t.Fatal(err)
		}
		defer client.Del(ctx, key)
		for _, kind := range []storekit.Kind{storekit.Inspect, storekit.Take, storekit.Take} {
			op := storekit.Op{Kind: kind, Tenant: "t", Rules: rules, Cost: 1}
			do(t, s, &op)
			allowed := true
			for i, r := range op.Results {
				if r.Remaining < 0 || r.Remaining > rules[i].Burst || r.RetryAfter < 0 || r.ResetAfter < 0 || (r.RetryAfter > 0) == r.Allowed {
					t.Fatalf("state %q, %q: rule %q: %+v", tat, used, rules[i].Name, r)
				}
				allowed = allowed && r.Allowed
			}
			if op.Allowed != allowed {
				t.Fatalf("state %q, %q: an Op of kind %d allowed %v, results %+v", tat, used, kind, op.Allowed, op.Results)
			}
			for field, v := range client.HGetAll(ctx, key).Val() {
				if re := kept[field]; re == nil || !re.MatchString(v) {
					t.Fatalf("state %q, %q: after an Op of kind %d the field %q holds %q", tat, used, kind, field, v)
				}
			}
		}
	})
}

// TestKeyOfAnotherType: a tenant whose key holds another type fails with
// ErrMisconfigured, takes nothing and leaves the key alone; the tenants
// whose calls share its round trip are served.
func TestKeyOfAnotherType(t *testing.T) {
	client := sharedClient(t)
	s := newStore(t, client)
	ctx := context.Background()
	client.Set(ctx, s.Key("bad"), "not a hash", 0)
	lim := tollgate.Limit{Rate: 1, Burst: 100}
	var wg sync.WaitGroup
	errs := make([]error, 40)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tenant := "bad"
			if i%2 == 1 {
				tenant = fmt.Sprint("good-", i)
			}
			_, errs[i] = s.Take(ctx, tenant, lim, 1)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if i%2 == 0 && !errors.Is(err, storekit.ErrMisconfigured) {
			t.Errorf("call %d on the key of another type: %v, want ErrMisconfigured", i, err)
		}
		if i%2 == 1 && err != nil {
			t.Errorf("call %d of a good tenant: %v", i, err)
		}
	}
	if v := client.Get(ctx, s.Key("bad")).Val(); v != "not a hash" {
		t.Errorf("the key of another type now holds %q", v)
	}
	if err := s.Do(ctx, &storekit.Op{Kind: storekit.Reset, Tenant: "bad", Rules: []storekit.Rule{bucket("", 1, 1)}}); !errors.Is(err, storekit.ErrMisconfigured) {
		t.Errorf("Reset of the key of another type: %v, want ErrMisconfigured", err)
	}
	if client.Exists(ctx, s.Key("bad")).Val() != 1 {
		t.Errorf("Reset deleted the key of another type")
	}
}

// TestExpiry: the hash expires when every state in it would be empty, the
// states of rules a call does not name included.
func TestExpiry(t *testing.T) {
	client := sharedClient(t)
	s := newStore(t, client)
	ctx := context.Background()
	do(t, s, &storekit.Op{Kind: storekit.Take, Tenant: "t", Rules: []storekit.Rule{bucket("", 1, 100), quota("day", 10, day)}, Cost: 1})
	do(t, s, &storekit.Op{Kind: storekit.Take, Tenant: "t", Rules: []storekit.Rule{bucket("", 1, 100)}, Cost: 50})
	ttl := client.PTTL(ctx, s.Key("t")).Val()
	_, end := day(time.Now())
	if until := time.Until(end); ttl < until-time.Second {
		t.Errorf("TTL %v: the quota's state, which lives %v more, would be lost", ttl, until)
	}
	// A bucket alone: the TTL ends when it is full again, with slack.
	do(t, s, &storekit.Op{Kind: storekit.Take, Tenant: "u", Rules: []storekit.Rule{bucket("", 10, 100)}, Cost: 100})
	if ttl := client.PTTL(ctx, s.Key("u")).Val(); ttl < 10*time.Second || ttl > 21*time.Second {
		t.Errorf("TTL %v after emptying a bucket that refills in 10s", ttl)
	}
}

// TestTake: the binding Take is a Do of one BucketRule.
func TestTake(t *testing.T) {
	client := sharedClient(t)
	s := newStore(t, client)
	ctx := context.Background()
	lim := tollgate.Limit{Rate: 2, Burst: 3}
	for i, want := range []int64{1, 1} {
		r, err := s.Take(ctx, "t", lim, 2)
		if err != nil || r.Allowed != (i == 0) || r.Remaining != want {
			t.Fatalf("take %d: %+v, %v", i, r, err)
		}
	}
	op := storekit.Op{Kind: storekit.Inspect, Tenant: "t", Rules: []storekit.Rule{storekit.BucketRule(2, 3)}, Cost: 1}
	do(t, s, &op)
	if op.Results[0].Remaining != 1 {
		t.Errorf("Do sees %+v after Take", op.Results[0])
	}
	if _, err := s.Take(ctx, "t", tollgate.Limit{Rate: 0, Burst: 1}, 1); !errors.Is(err, tollgate.ErrInvalidLimit) {
		t.Errorf("invalid limit: %v", err)
	}
	if _, err := s.Take(ctx, "t", lim, 4); !errors.Is(err, tollgate.ErrInvalidLimit) {
		t.Errorf("cost above the burst: %v", err)
	}
}

// TestNewErrors: New refuses what can never work, and names it.
func TestNewErrors(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	for name, c := range map[string]struct {
		client redis.UniversalClient
		opts   []redisstore.Option
		want   string
	}{
		"nil client":    {nil, nil, "nil"},
		"nil *Client":   {(*redis.Client)(nil), nil, "nil"},
		"brace":         {client, []redisstore.Option{redisstore.WithPrefix("a{b")}, "'{'"},
		"timeout":       {client, []redisstore.Option{redisstore.WithTimeout(0)}, "WithTimeout"},
		"backoff":       {client, []redisstore.Option{redisstore.WithCircuitBreaker(3, 0)}, "backoff"},
		"other clients": {otherClient{client}, nil, "not supported"},
	} {
		_, err := redisstore.New(c.client, c.opts...)
		if !errors.Is(err, storekit.ErrMisconfigured) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrMisconfigured naming %q", name, err, c.want)
		}
	}
}

type otherClient struct{ redis.UniversalClient }

// TestGiveUp: a caller whose context ends returns at once, and a Cancel
// in the background does not wait on a silent Redis.
func TestGiveUp(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	defer client.Close()
	s, err := redisstore.New(client, redisstore.WithLogger(nil), redisstore.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lim := tollgate.Limit{Rate: 1, Burst: 1}
	if _, err := s.Take(context.Background(), "t", lim, 1); err != nil {
		t.Fatal(err)
	}
	proxy.Silence()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.Take(ctx, "t", lim, 1)
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, redisstore.ErrUnavailable) || took > 15*time.Millisecond+20*time.Millisecond {
		t.Errorf("Take whose context ends after 20ms: %v after %v", err, took)
	}
	cancelled, stop := context.WithCancel(context.Background())
	stop()
	start = time.Now()
	err = s.Do(cancelled, &storekit.Op{Kind: storekit.Cancel, Tenant: "t", Rules: []storekit.Rule{storekit.BucketRule(1, 1)}, Cost: 1, Mark: 1})
	if took := time.Since(start); !errors.Is(err, context.Canceled) || took > 5*time.Millisecond {
		t.Errorf("Cancel with a cancelled context: %v after %v", err, took)
	}
}
