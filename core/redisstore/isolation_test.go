package redisstore_test

import (
	"bytes"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/core/storetest"
)

// A logBuffer collects a logger's lines, safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger { return slog.New(slog.NewJSONHandler(b, nil)) }

// TestWrongTypeKey puts a hash where a tenant's bucket belongs and sends
// that tenant's calls in the same batches as other tenants': only the
// victim's calls fail, as misconfiguration, and the calls that failed took
// nothing from the victim's other rules; the hash is left as it was.
func TestWrongTypeKey(t *testing.T) {
	client := newClient(t)
	prefix := testPrefix(t)
	clock := storetest.NewClock()
	s := newStore(t, client, redisstore.WithPrefix(prefix), redisstore.WithTestClock(clock.Now), redisstore.WithDenialCache(0))
	victim := redisstore.RedisKey(prefix, "victim")
	if err := client.HSet(bg, victim+":b:x", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	limit := tollgate.Limit{Rate: 1, Burst: 5}
	rules := []tollgate.Rule{{Limit: limit}, {Sub: "b:x", Limit: limit}}
	const tenants, workers, each = 40, 32, 100
	var allowed [tenants]atomic.Int64
	var victimErrs, otherErrs atomic.Int64
	var firstOther atomic.Value
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range each {
				if rng.IntN(100) < 5 {
					op := &tollgate.Op{Kind: tollgate.OpTake, Key: "victim", Rules: rules, Cost: 1}
					err := s.Do(bg, op)
					if !errors.Is(err, tollgate.ErrMisconfigured) || errors.Is(err, redisstore.ErrUnavailable) ||
						!strings.Contains(err.Error(), victim+":b:x") {
						t.Errorf("the victim's call: %v, want a misconfiguration naming its key", err)
						return
					}
					victimErrs.Add(1)
					continue
				}
				k := rng.IntN(tenants)
				op := &tollgate.Op{Kind: tollgate.OpTake, Key: "tenant-" + strconv.Itoa(k), Rules: rules, Cost: 1}
				if err := s.Do(bg, op); err != nil {
					otherErrs.Add(1)
					firstOther.CompareAndSwap(nil, err)
					continue
				}
				if op.Allowed {
					allowed[k].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d calls of the victim failed, %d calls of other tenants", victimErrs.Load(), otherErrs.Load())
	if n := otherErrs.Load(); n > 0 {
		t.Fatalf("%d calls of other tenants failed, the first with %v", n, firstOther.Load())
	}
	if victimErrs.Load() == 0 {
		t.Fatal("the victim was never called: the test tested nothing")
	}
	for k := range allowed {
		if n := allowed[k].Load(); n > limit.Burst {
			t.Fatalf("tenant %d: %d allowed with the clock stopped, burst %d", k, n, limit.Burst)
		}
	}
	// The failed calls took nothing from the victim's main bucket.
	op := &tollgate.Op{Kind: tollgate.OpTake, Key: "victim", Rules: rules[:1], Cost: 5}
	if err := s.Do(bg, op); err != nil || !op.Allowed {
		t.Fatalf("the victim's main bucket after its failed calls: %+v, %v; want it full", op.Results, err)
	}
	if typ, _ := client.Type(bg, victim+":b:x").Result(); typ != "hash" {
		t.Fatalf("the foreign key is now a %s", typ)
	}
}

// TestInvalidState writes values that are no valid state into tenants'
// keys: each is read as a full bucket (or an unused quota), repaired by the
// next write, and logged once.
func TestInvalidState(t *testing.T) {
	client := newClient(t)
	prefix := testPrefix(t)
	var logs logBuffer
	s := newStore(t, client, redisstore.WithPrefix(prefix), redisstore.WithDenialCache(0), redisstore.WithLogger(logs.logger()))
	now, err := client.Time(bg).Result()
	if err != nil {
		t.Fatal(err)
	}
	beyond := now.UnixMicro() + 3*tollgate.MaxWindow.Microseconds()
	values := []string{"abc", "1e300", "-5", "nan", "inf", "12.5", "", strconv.FormatInt(beyond, 10)}
	limit := tollgate.Limit{Rate: 10, Burst: 5}
	for i, v := range values {
		tenant := "t" + strconv.Itoa(i)
		key := redisstore.RedisKey(prefix, tenant)
		client.Set(bg, key, v, 0) // no TTL, as a stray write would leave it
		for range 3 {
			r, err := s.Take(bg, tenant, limit, 1)
			if err != nil {
				t.Fatalf("value %q: %v", v, err)
			}
			if !r.Allowed {
				t.Fatalf("value %q: denied %+v; a key without a valid state is a full bucket", v, r)
			}
		}
		stored, _ := client.Get(bg, key).Int64()
		ttl, _ := client.PTTL(bg, key).Result()
		if d := stored - now.UnixMicro(); d < 0 || d > 60e6 || ttl <= 0 || ttl > time.Second {
			t.Fatalf("value %q was not repaired: now %d, TTL %v", v, stored, ttl)
		}
	}
	// A quota's counter too.
	qkey := "q"
	rules := []tollgate.Rule{{Sub: "day", Quota: tollgate.PerDay(10)}}
	op := &tollgate.Op{Kind: tollgate.OpTake, Key: qkey, Rules: rules, Cost: 1}
	if err := s.Do(bg, op); err != nil || !op.Allowed {
		t.Fatal(op.Results, err)
	}
	var quotaKey string
	for _, k := range scanKeys(t, client, redisstore.RedisKey(prefix, qkey)+":day:") {
		quotaKey = k
	}
	client.Set(bg, quotaKey, "garbage", 0)
	if err := s.Do(bg, op); err != nil || !op.Allowed || op.Results[0].Remaining != 9 {
		t.Fatalf("a garbage quota counter: %+v, %v; want an unused quota", op.Results, err)
	}
	lines := strings.Count(logs.String(), "was repaired")
	if lines != len(values)+1 {
		t.Fatalf("%d repair lines for %d keys, want one each:\n%s", lines, len(values)+1, logs.String())
	}
}
