package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// mainRedis is the Redis that CI guarantees; these tests never skip
// without it.
const mainRedis = "127.0.0.1:6379"

func newClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: mainRedis})
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("these tests need Redis on %s (.ci/run starts one): %v", mainRedis, err)
	}
	return c
}

// testPrefix returns a key prefix that no other test or run shares.
func testPrefix(t testing.TB) string {
	name := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	return fmt.Sprintf("tollgate-test:%d:%s:", time.Now().UnixNano(), name)
}

// otherClient hides the concrete client type, so the Store sends one key per
// script call, as it does for a Ring or any wrapper.
type otherClient struct{ redis.UniversalClient }

// scanKeys returns the keys under prefix.
func scanKeys(t testing.TB, c redis.UniversalClient, prefix string) []string {
	t.Helper()
	var keys []string
	ctx := context.Background()
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for it.Next(ctx) {
			keys = append(keys, it.Val())
		}
		return it.Err()
	}
	var err error
	switch c := c.(type) {
	case *redis.ClusterClient:
		var mu = make(chan struct{}, 1)
		mu <- struct{}{}
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			<-mu
			defer func() { mu <- struct{}{} }()
			return scan(ctx, n)
		})
	case *redis.Client:
		err = scan(ctx, c)
	default:
		t.Fatalf("scanKeys: unsupported client %T", c)
	}
	if err != nil {
		t.Fatalf("SCAN: %v", err)
	}
	return keys
}
