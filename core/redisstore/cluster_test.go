package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core/redisstore"
)

// TestCluster starts a three-master Redis Cluster and runs the store's
// checks through redis.NewClusterClient: the conformance kit, exactness over
// many slots at once, the accuracy test, and the slot of every key.
func TestCluster(t *testing.T) {
	client, nodes := startCluster(t, 3)

	// The kit without the denial cache, so every decision is the script's
	// on its slot's node.
	t.Run("conformance", func(t *testing.T) { runConformance(t, client, redisstore.WithDenialCache(0)) })
	t.Run("ops", func(t *testing.T) { runOps(t, client, redisstore.WithDenialCache(0)) })
	t.Run("many tenants", func(t *testing.T) { runManyTenants(t, client) })
	t.Run("accuracy", func(t *testing.T) {
		var clients []redis.UniversalClient
		for range 4 {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].addr(), nodes[1].addr(), nodes[2].addr()}})
			t.Cleanup(func() { c.Close() })
			clients = append(clients, c)
		}
		runAccuracy(t, clients, 3*time.Second)
	})
	t.Run("key slots", func(t *testing.T) {
		node := redis.NewClient(&redis.Options{Addr: nodes[0].addr()})
		defer node.Close()
		tenants := []string{"acme", "{acme}", "x{acme}y", "}{", "{", "#", "", strings.Repeat("{t}", 100), "日本"}
		seen := map[string]string{}
		for _, tenant := range tenants {
			rkey := redisstore.RedisKey("tollgate:", tenant)
			want, err := node.ClusterKeySlot(context.Background(), rkey).Result()
			if err != nil {
				t.Fatal(err)
			}
			if got := redisstore.Slot(rkey); int64(got) != want {
				t.Errorf("tenant %q: Slot(%q) = %d, CLUSTER KEYSLOT says %d", tenant, rkey, got, want)
			}
			if other, ok := seen[rkey]; ok {
				t.Errorf("tenants %q and %q share the key %q", tenant, other, rkey)
			}
			seen[rkey] = tenant
		}
		// A tenant that names another's hash tag does not land in its slot
		// through it: "{acme}" is hashed whole, not read as the tag "acme".
		a := redisstore.Slot(redisstore.RedisKey("tollgate:", "acme"))
		b := redisstore.Slot(redisstore.RedisKey("tollgate:", "x{acme}y"))
		c := redisstore.Slot(redisstore.RedisKey("tollgate:", "{acme}"))
		if a == b && a == c {
			t.Errorf("tenants naming the hash tag {acme} all landed in acme's slot %d", a)
		}
	})
}
