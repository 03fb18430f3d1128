package redisstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/core/redistest"
	"github.com/tollgate-go/tollgate/core/storekit"
	"github.com/tollgate-go/tollgate/core/storetest"
)

// checkedScript is apply.lua with its commands going through a wrapper
// that fails the script when a command names a key that is not in KEYS:
// Redis Cluster, and Redis itself, support only scripts that declare every
// key they touch.
var checkedScript = strings.Replace(redisstore.ScriptSource, "local call, pcall = redis.call, redis.pcall", `local declared = {}
for _, k in ipairs(KEYS) do
  declared[k] = true
end
local function checked(run)
  return function(command, ...)
    local key = ...
    if string.upper(command) ~= 'TIME' and not declared[key] then
      error('the script touched a key it was not given: ' .. command .. ' ' .. tostring(key))
    end
    return run(command, ...)
  end
end
local call, pcall = checked(redis.call), checked(redis.pcall)`, 1)

func TestCheckedScriptIsChecked(t *testing.T) {
	if checkedScript == redisstore.ScriptSource {
		t.Fatal("apply.lua has no line 'local call, pcall = redis.call, redis.pcall' for the test of declared keys to replace")
	}
	// The wrapper must catch a script that strays: make one that reads a
	// key of its own making.
	stray := strings.Replace(checkedScript, "pcall('HMGET', key,", "pcall('HMGET', key .. ':other',", 1)
	client := sharedClient(t)
	s := newStore(t, client, redisstore.WithScript(stray))
	err := s.Do(context.Background(), &storekit.Op{Kind: storekit.Take, Tenant: "t", Rules: []storekit.Rule{bucket("", 1, 1)}, Cost: 1})
	if err == nil || !strings.Contains(err.Error(), "touched a key it was not given") {
		t.Fatalf("a script that touches an undeclared key: %v; want the wrapper's error", err)
	}
}

// TestConformance runs the conformance kit on a single server.
func TestConformance(t *testing.T) {
	client := sharedClient(t)
	storetest.Run(t, func(t *testing.T, clock *storetest.Clock) tollgate.Store {
		return newStore(t, client, redisstore.WithTestClock(clock.Now), redisstore.WithTimeout(patientTimeout))
	})
}

// TestConformanceReplicas runs the kit's concurrency checks over four
// Stores that share one Redis, each with a client of its own, as replicas
// of a service do, and its checks of Limiter.Wait on Redis's own clock.
func TestConformanceReplicas(t *testing.T) {
	long(t)
	addr := redistest.Shared(t)
	prefix := redistest.Prefix(t)
	replicas := func(opts ...redisstore.Option) []tollgate.Store {
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
	clock := storetest.NewClock()
	t.Run("Concurrency", func(t *testing.T) {
		storetest.RunConcurrency(t, replicas(redisstore.WithTestClock(clock.Now), redisstore.WithTimeout(patientTimeout)), clock)
	})
	t.Run("Wait", func(t *testing.T) { storetest.RunWait(t, replicas()) })
}

// TestDeclaredKeys runs the conformance kit and the model comparison
// through the checked script, on a single server and on a Redis Cluster of
// three masters.
func TestDeclaredKeys(t *testing.T) {
	long(t)
	for name, client := range map[string]redis.UniversalClient{"single": sharedClient(t), "cluster": startCluster(t)} {
		t.Run(name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T, clock *storetest.Clock) tollgate.Store {
				return newStore(t, client, redisstore.WithTestClock(clock.Now), redisstore.WithScript(checkedScript), redisstore.WithTimeout(patientTimeout))
			})
			for seed := range uint64(3) {
				compareWithModel(t, client, randomSteps(seed, 300), redisstore.WithScript(checkedScript))
			}
		})
	}
}

// startCluster starts a Redis Cluster of three masters and returns a client
// of it.
func startCluster(t *testing.T) *redis.ClusterClient {
	t.Helper()
	nodes := redistest.StartCluster(t, 3)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.Addrs(nodes)})
	t.Cleanup(func() { client.Close() })
	return client
}
