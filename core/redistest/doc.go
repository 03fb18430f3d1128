// Package redistest gives tests real Redis servers that they own, so that
// the tests neither need nor touch a Redis the developer runs, and a
// fault-injecting proxy to put in front of them: tollgate's own tests use
// it, and so may the tests of an application or a store on tollgate. It
// uses the standard library only, and redis-server from PATH.
//
// # The shared server
//
// Most tests only read and write keys. They share one server per test
// process, through Shared, and keep their keys under Prefix, which deletes
// them when the test ends:
//
//	func TestMain(m *testing.M) { os.Exit(redistest.Run(m)) }
//
//	func TestSomething(t *testing.T) {
//		client := redis.NewClient(&redis.Options{Addr: redistest.Shared(t)})
//		store, err := redisstore.New(client, redisstore.WithPrefix(redistest.Prefix(t)))
//		...
//	}
//
// The shared server is a throwaway redis-server on a free loopback port
// (started on first use, stopped by Run), unless the environment variable
// TOLLGATE_TEST_REDIS (EnvAddr) names one, such as 127.0.0.1:6379. Run
// fails the package if its own server is left holding keys outside the
// run's prefixes: such a test would leave them in that Redis.
//
// # Servers of one's own
//
// A test that kills, pauses, restarts, reconfigures or flushes a Redis
// starts its own with Start (StartCluster for a Redis Cluster). Each
// listens on 127.0.0.1 only, keeps nothing on disk and is killed by its
// PID when the test ends; on Linux the kernel kills it too if the test
// process dies first.
//
// # Faults on the wire
//
// NewProxy puts a TCP proxy in front of any of them: added latency each way
// (SetLatency), a server that accepts and reads but never answers
// (Silence, Resume), dropped connections (Cut), a move to another server
// (SetTarget).
//
//	srv := redistest.Start(t)
//	proxy := redistest.NewProxy(t, srv.Addr())
//	client := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
//	proxy.SetLatency(0, 30*time.Millisecond) // every reply 30 ms late
//	proxy.Silence()                          // no reply at all
//	proxy.Resume()
//	proxy.Cut()                              // every connection dropped
//
// Without redis-server on PATH, Start, StartCluster and Shared (when
// TOLLGATE_TEST_REDIS is unset) fail the test and say how to install it;
// they never skip, so a machine without Redis cannot pass the suite by
// running less of it. `make test` installs redis-server where it is
// missing.
package redistest
