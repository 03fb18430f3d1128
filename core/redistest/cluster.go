package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// StartCluster starts a Redis Cluster of masters nodes (no replicas), each
// a Server of its own with extra arguments after the cluster's, splits the
// hash slots evenly among them and returns once every node reports the
// cluster ok and knows every other node. The nodes are killed when tb
// ends. It needs nothing but redis-server: the cluster is made with
// CLUSTER ADDSLOTS and CLUSTER MEET, as redis-cli --cluster create does.
func StartCluster(tb testing.TB, masters int, extra ...string) []*Server {
	tb.Helper()
	if masters < 1 {
		tb.Fatalf("redistest.StartCluster: %d masters, want at least 1", masters)
	}
	args := append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "5000"}, extra...)
	nodes := make([]*Server, masters)
	for i := range nodes {
		nodes[i] = Start(tb, args...)
	}
	if err := makeCluster(nodes); err != nil {
		tb.Fatal(err)
	}
	return nodes
}

// Addrs returns the addresses of servers, as a cluster client wants them.
func Addrs(servers []*Server) []string {
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	return addrs
}

func makeCluster(nodes []*Server) error {
	// Nodes meet first and slots come after: a node that owns slots and
	// sees other masters it cannot reach yet counts itself in a minority,
	// and waits for up to the node timeout once they are reachable.
	for _, n := range nodes[1:] {
		if _, err := command(nodes[0].Addr(), 10*time.Second, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(n.Port())); err != nil {
			return fmt.Errorf("redistest: CLUSTER MEET %s: %w", n.Addr(), err)
		}
	}
	if err := waitCluster(nodes, "cluster_known_nodes:"+strconv.Itoa(len(nodes))); err != nil {
		return err
	}
	for i, n := range nodes {
		first, last := i*clusterSlots/len(nodes), (i+1)*clusterSlots/len(nodes)
		args := []string{"CLUSTER", "ADDSLOTS"}
		for slot := first; slot < last; slot++ {
			args = append(args, strconv.Itoa(slot))
		}
		if _, err := command(n.Addr(), 10*time.Second, args...); err != nil {
			return fmt.Errorf("redistest: CLUSTER ADDSLOTS on %s: %w", n.Addr(), err)
		}
	}
	return waitCluster(nodes, "cluster_state:ok", "cluster_slots_ok:"+strconv.Itoa(clusterSlots),
		"cluster_known_nodes:"+strconv.Itoa(len(nodes)))
}

// waitCluster waits until CLUSTER INFO on every node says all of want, and
// no node is still in a handshake.
func waitCluster(nodes []*Server, want ...string) error {
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range nodes {
		for {
			info, err := command(n.Addr(), 5*time.Second, "CLUSTER", "INFO")
			s, _ := info.(string)
			if err == nil && containsAll(s, want) && handshakesDone(n) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("redistest: cluster node %s not ready (want %v): %v\n%s", n.Addr(), want, err, s)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// handshakesDone reports whether n knows every node it met by its ID.
func handshakesDone(n *Server) bool {
	reply, err := command(n.Addr(), 5*time.Second, "CLUSTER", "NODES")
	s, _ := reply.(string)
	return err == nil && !strings.Contains(s, "handshake") && !strings.Contains(s, "noaddr")
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
