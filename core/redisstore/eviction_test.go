package redisstore_test

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/redisstore"
)

// TestEvictionFlood throttles 20 tenants, then floods a Redis whose
// maxmemory is small with 100,000 one-request tenants, then asks for the
// throttled tenants again. With maxmemory-policy noeviction (the safe
// configuration, docs/redis.md) their buckets survive: no throttled tenant
// gets a request through (the flood's own writes fail once memory is full,
// and the failure policy decides them). With allkeys-lru, buckets are
// evicted and throttled tenants get fresh bursts: the figure is logged.
func TestEvictionFlood(t *testing.T) {
	for _, policy := range []string{"noeviction", "allkeys-lru"} {
		t.Run(policy, func(t *testing.T) {
			srv := startServer(t, "--maxmemory", "3mb", "--maxmemory-policy", policy)
			client := redis.NewClient(&redis.Options{Addr: srv.addr(), MaxRetries: -1})
			defer client.Close()
			s := newStore(t, client, redisstore.WithPrefix(testPrefix(t)), redisstore.WithDenialCache(0),
				redisstore.WithCircuitBreaker(0, 0))
			throttled := tollgate.Limit{Rate: 1.0 / 3600, Burst: 5}
			for i := range 20 {
				for range throttled.Burst {
					if r, err := s.Take(bg, "throttled-"+strconv.Itoa(i), throttled, 1); err != nil || !r.Allowed {
						t.Fatalf("filling tenant %d: %+v, %v", i, r, err)
					}
				}
			}
			flood := tollgate.Limit{Rate: 1.0 / 3600, Burst: 1}
			var wg sync.WaitGroup
			var mu sync.Mutex
			failed := 0
			for w := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					n := 0
					for i := w; i < 100_000; i += 16 {
						if _, err := s.Take(context.Background(), "flood-"+strconv.Itoa(i), flood, 1); err != nil {
							n++
						}
					}
					mu.Lock()
					failed += n
					mu.Unlock()
				}()
			}
			wg.Wait()
			overshoot, errs := 0, 0
			for i := range 20 {
				r, err := s.Take(bg, "throttled-"+strconv.Itoa(i), throttled, 1)
				switch {
				case err != nil:
					errs++
				case r.Allowed:
					overshoot++
				}
			}
			info, _ := client.Info(bg, "stats").Result()
			t.Logf("%s: flood of 100,000 tenants, %d of its calls failed; evicted_keys %s; throttled tenants: %d of 20 allowed again, %d errors",
				policy, failed, infoValue(info, "evicted_keys"), overshoot, errs)
			if policy == "noeviction" && (overshoot > 0 || errs > 0) {
				t.Fatalf("with noeviction %d throttled tenants got through (%d errors)", overshoot, errs)
			}
		})
	}
}

func infoValue(info, name string) string {
	for _, line := range splitLines(info) {
		if len(line) > len(name) && line[:len(name)+1] == name+":" {
			return line[len(name)+1:]
		}
	}
	return "?"
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out = append(out, trimCR(s[start:i]))
			start = i + 1
		}
	}
	return append(out, trimCR(s[start:]))
}

func trimCR(s string) string {
	if len(s) > 0 && s[len(s)-1] == '\r' {
		return s[:len(s)-1]
	}
	return s
}
