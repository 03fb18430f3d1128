package e2e

import (
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate-go/tollgate/core/redistest"
)

const helloMethod = "/tollgate.demo.v1.Demo/Hello"

// TestGRPC runs examples/grpc: gRPC and HTTP on one port, calls
// limited per tenant with RetryInfo on refusals, health checks not
// limited, the admin API, and the example's own client, which waits what
// RetryInfo says.
func TestGRPC(t *testing.T) {
	t.Parallel()
	a := start(t, "grpc", []string{"ADMIN_TOKEN=" + adminToken})
	conn, err := grpc.NewClient(a.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := withTimeout(t, time.Minute)

	for range 25 {
		if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("health check, without a tenant: %v", err)
		}
	}
	err = conn.Invoke(ctx, helloMethod, wrapperspb.String(""), new(wrapperspb.StringValue))
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("Hello without a tenant: %v, want Unauthenticated", err)
	}

	tenant := unique("grpc")
	tenantCtx := metadata.AppendToOutgoingContext(ctx, "x-tenant-id", tenant)
	for i := 1; ; i++ {
		var header metadata.MD
		reply := new(wrapperspb.StringValue)
		err := conn.Invoke(tenantCtx, helloMethod, wrapperspb.String(""), reply, grpc.Header(&header))
		if err == nil {
			if reply.GetValue() != "hello, "+tenant || !strings.HasPrefix(strings.Join(header.Get("ratelimit"), ""), `"free";r=`) {
				t.Fatalf("call %d: %q, ratelimit %v", i, reply.GetValue(), header.Get("ratelimit"))
			}
			continue
		}
		st := status.Convert(err)
		if st.Code() != codes.ResourceExhausted || i <= 20 {
			t.Fatalf("call %d: %v, want ResourceExhausted after the burst of 20", i, err)
		}
		var delay time.Duration
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.RetryInfo); ok {
				delay = info.GetRetryDelay().AsDuration()
			}
		}
		if delay < time.Second || delay > 2*time.Second {
			t.Errorf("RetryInfo delay %v, want 1 s (a token in 500 ms, rounded up)", delay)
		}
		break
	}
	if st := inspect(t, a, tenant); st["plan"] != "free" || remaining(t, st) > 1 {
		t.Errorf("the admin API on the gRPC port: %v", st)
	}

	// The example's client: 21 Hello of a fresh free tenant, the 21st
	// refused and retried after its RetryInfo delay.
	began := time.Now()
	out, err := exec.CommandContext(ctx, binary(t, "grpc"), "-connect", a.addr, "-tenant", unique("grpc-client"), "-hellos", "21", "-reports", "0").CombinedOutput()
	if err != nil {
		t.Fatalf("the client: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), `"hello, e2e-grpc-client-`); n != 21 || !strings.Contains(string(out), "as its RetryInfo says") || time.Since(began) < 500*time.Millisecond {
		t.Errorf("the client's %d answers in %v, want 21 and one wait:\n%s", n, time.Since(began), out)
	}
}

// TestWorkersShareABudget runs two workers on one Redis: initech's
// backlog runs at its plan's rate across both (a burst of 100, then 10 a
// second), taken by each, while the other tenants' jobs never wait for a
// turn.
func TestWorkersShareABudget(t *testing.T) {
	t.Parallel()
	const duration = 4 * time.Second
	env := []string{"REDIS_URL=redis://" + redistest.Start(t).Addr() + "/0"}
	began := time.Now()
	workers := []*app{start(t, "worker", env, "-duration", duration.String()), start(t, "worker", env, "-duration", duration.String())}
	jobs := map[string]float64{}
	for i, w := range workers {
		if err := w.wait(withTimeout(t, duration+20*time.Second)); err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
		for _, line := range w.logs(func(m map[string]any) bool { return m["msg"] == "jobs done" }) {
			tenant, n := line["tenant"].(string), line["jobs"].(float64)
			jobs[tenant] += n
			if tenant == "initech" && n == 0 {
				t.Errorf("worker %d ran none of initech's jobs", i)
			}
			if tenant != "initech" && (line["delayed"] != 0.0 || line["max_wait_ms"].(float64) > 500) {
				t.Errorf("worker %d: %v: within its plan, a job should not wait for a turn", i, line)
			}
		}
	}
	if ceiling := 100 + 10*time.Since(began).Seconds() + 1; jobs["initech"] < 100+10*(duration.Seconds()-1) || jobs["initech"] > ceiling {
		t.Errorf("initech's jobs: %v in about %v, want its burst of 100 and 10 a second, at most %.0f", jobs["initech"], duration, ceiling)
	}
	if want := 2 * 40 * duration.Seconds(); jobs["acme"] < want*0.8 {
		t.Errorf("acme's jobs: %v, want about %v: 40 a second on each worker", jobs["acme"], want)
	}
}

// TestReplicasDemo runs examples/replicas on Redis: the flooding tenant
// gets its plan's budget once across the replicas, not once per replica.
func TestReplicasDemo(t *testing.T) {
	t.Parallel()
	a := start(t, "replicas", []string{"REDIS_URL=redis://" + redistest.Start(t).Addr() + "/0"}, "-n", "2", "-duration", "2s", "-flood", "200")
	// The table is not JSON: wait for its last line.
	until(t, func() bool { return strings.Contains(a.out.String(), "budget = burst") })
	// tenant, plan, sent, allowed by r1 and r2, in all, the budget, 429s,
	// failed open.
	row := regexp.MustCompile(`initech\s+startup\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)`).FindStringSubmatch(a.out.String())
	if row == nil {
		t.Fatalf("no row for initech in:\n%s", a.out)
	}
	perReplica := [2]int{atoi(row[2]), atoi(row[3])}
	total, budget, failedOpen := atoi(row[4]), atoi(row[5]), atoi(row[7])
	if total+failedOpen < 100 || total > budget+1 || perReplica[0] == 0 || perReplica[1] == 0 {
		t.Errorf("initech: %v per replica, %d in all (and %d failed open), budget %d: want the budget once, from both", perReplica, total, failedOpen, budget)
	}
	if r := do(t, http.MethodGet, a.url+"/api/hello", "acme"); r.status != http.StatusOK || r.header.Get("X-Replica") == "" {
		t.Errorf("after the demo, the balancer answers %d, X-Replica %q", r.status, r.header.Get("X-Replica"))
	}
}

// TestClientDemo runs examples/client: the paced client does about the
// naive one's work with a small fraction of its requests.
func TestClientDemo(t *testing.T) {
	t.Parallel()
	cmd := exec.CommandContext(withTimeout(t, time.Minute), binary(t, "client"), "-duration", "3s")
	cmd.Env = append(cmd.Environ(), "ADDR=127.0.0.1:0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("examples/client: %v\n%s", err, out)
	}
	sent := map[string][2]int{}
	for _, m := range regexp.MustCompile(`(naive|paced)\s+\S+\s+(\d+)\s+\d+\s+\d+\s+\d+\s+(\d+)`).FindAllStringSubmatch(string(out), -1) {
		sent[m[1]] = [2]int{atoi(m[2]), atoi(m[3])}
	}
	naive, paced := sent["naive"], sent["paced"]
	// The work is in whole tokens over 3 s: a paced client that sleeps out
	// a Retry-After, rounded up to a second, on a loaded machine does
	// less of it than the 26 the plan allows, but not less than half.
	if paced[0] == 0 || naive[0] < 10*paced[0] || 2*paced[1] < naive[1] {
		t.Errorf("naive sent %d for %d tokens of work, paced %d for %d: want the paced client to do the work with far fewer requests\n%s",
			naive[0], naive[1], paced[0], paced[1], out)
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
