package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A server is a redis-server process that a test owns: it listens on a
// loopback port of its own, keeps nothing on disk, and is stopped by its PID
// when the test ends.
type server struct {
	t    testing.TB
	port int
	dir  string
	args []string

	mu  sync.Mutex
	cmd *exec.Cmd
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// redisServerPath finds redis-server, or fails the test with what to do.
func redisServerPath(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("this test starts its own redis-server processes and none is on PATH (apt-get install redis-server): %v", err)
	}
	return p
}

// freePort returns a loopback port that is free now, and whose cluster bus
// port (port + 10000) is free too.
func freePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		port := 20000 + rand.IntN(30000)
		l1, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l2, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		l1.Close()
		if err != nil {
			continue
		}
		l2.Close()
		return port
	}
	t.Fatal("no free loopback port found")
	return 0
}

// startServer starts a redis-server on a free loopback port with extra
// arguments, and waits until it answers.
func startServer(t testing.TB, extra ...string) *server {
	t.Helper()
	s := &server{t: t, port: freePort(t), dir: t.TempDir()}
	s.args = append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"),
	}, extra...)
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *server) start() {
	s.t.Helper()
	cmd := exec.Command(redisServerPath(s.t), s.args...)
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("starting redis-server: %v", err)
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	s.waitUp()
}

// waitUp waits until the server answers PING.
func (s *server) waitUp() {
	s.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.t.Fatalf("redis-server on %s did not answer: %v\n%s", s.addr(), err, log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kill stops the server at once (SIGKILL to its PID) and waits for it.
func (s *server) kill() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

func (s *server) stop() { s.kill() }

// startCluster starts a Redis Cluster of n masters, no replicas, and returns
// a client of it once every node reports the cluster ok.
func startCluster(t *testing.T, n int) (*redis.ClusterClient, []*server) {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("this test creates a Redis Cluster with redis-cli and none is on PATH (apt-get install redis-tools): %v", err)
	}
	var nodes []*server
	var addrs []string
	for range n {
		s := startServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000")
		nodes = append(nodes, s)
		addrs = append(addrs, s.addr())
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range nodes {
		c := redis.NewClient(&redis.Options{Addr: s.addr()})
		for {
			info, err := c.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				c.Close()
				t.Fatalf("cluster node %s not ok: %v %s", s.addr(), err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.Close()
	}
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
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

var _ = fmt.Sprintf
