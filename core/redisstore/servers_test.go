package redisstore_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/internal/testredis"
)

// A server is a redis-server process that a test owns (testredis.Start):
// it listens on a loopback port of its own, keeps nothing on disk, and is
// killed by its PID when the test ends.
type server struct {
	*testredis.Server
	t testing.TB
}

func (s *server) addr() string { return s.Addr() }

// startServer starts a redis-server on a free loopback port with extra
// arguments, and waits until it answers.
func startServer(t testing.TB, extra ...string) *server {
	t.Helper()
	return &server{testredis.Start(t, extra...), t}
}

// kill stops the server at once (SIGKILL to its PID) and waits for it.
func (s *server) kill() { s.Kill() }

// start starts a killed server again on its port.
func (s *server) start() {
	s.t.Helper()
	if err := s.Restart(); err != nil {
		s.t.Fatal(err)
	}
}

// freePort returns a loopback port where nothing listens now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startCluster starts a Redis Cluster of n masters, no replicas, and returns
// a client of it once every node reports the cluster ok.
func startCluster(t *testing.T, n int) (*redis.ClusterClient, []*server) {
	t.Helper()
	var nodes []*server
	for _, s := range testredis.StartCluster(t, n) {
		nodes = append(nodes, &server{s, t})
	}
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs(nodes)})
	t.Cleanup(func() { client.Close() })
	// Every node must know every slot before the tests start.
	for i := 0; ; i++ {
		if err := client.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
			return c.Ping(ctx).Err()
		}); err == nil {
			break
		} else if i > 100 {
			t.Fatalf("cluster not reachable: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return client, nodes
}

func addrs(servers []*server) []string {
	var a []string
	for _, s := range servers {
		a = append(a, s.addr())
	}
	return a
}
