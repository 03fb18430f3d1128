package bench

import (
	"context"
	"net"
	"strconv"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	tollgategrpc "github.com/tollgate-go/tollgate/grpc"
)

// How the gRPC benchmark is read (run with `benchstat -col /lib`):
//
//   - path=call is a whole unary call, client to server and back, over an
//     in-memory connection (bufconn): the standard health service's Check,
//     with no interceptor (lib=bare) or with tollgate's unary interceptor
//     over a memory.Store (lib=tollgate). ns/op less bare's is what the
//     interceptor adds to a call, header metadata on the wire included.
//   - path=interceptor calls the server's interceptor chain directly with a
//     context as the server would give it (incoming metadata, a transport
//     stream that merges header metadata as gRPC's does), without the
//     network and the codec, so that the interceptor's own cost is not lost
//     in the noise of a whole call.
//   - Calls walk grpcTenants tenants (the x-tenant-id metadata) in turn,
//     each tracked before the timer starts; the plan allows every call.
const grpcTenants = 10_000

func grpcLimiter(b *testing.B) *tollgate.Limiter {
	store := memory.New()
	b.Cleanup(func() { store.Close() })
	plan := tollgate.Plan{Name: "bench", Limit: tollgate.Limit{Rate: 1e6, Burst: 1_000_000_000}}
	l, err := tollgate.New(store, tollgate.SinglePlan(plan))
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkAdapterGRPC measures what the unary interceptor adds to a gRPC
// call.
func BenchmarkAdapterGRPC(b *testing.B) {
	mds := make([]metadata.MD, grpcTenants)
	for i := range mds {
		mds[i] = metadata.Pairs("x-tenant-id", "tenant-"+strconv.Itoa(i))
	}
	cases := []struct {
		name        string
		interceptor func(b *testing.B) grpc.UnaryServerInterceptor
	}{
		{"bare", nil},
		{"tollgate", func(b *testing.B) grpc.UnaryServerInterceptor {
			return tollgategrpc.UnaryServerInterceptor(grpcLimiter(b))
		}},
	}
	for _, c := range cases {
		b.Run("path=call/lib="+c.name, func(b *testing.B) {
			var opts []grpc.ServerOption
			if c.interceptor != nil {
				opts = append(opts, grpc.ChainUnaryInterceptor(c.interceptor(b)))
			}
			runGRPCCalls(b, opts, mds, c.interceptor != nil)
		})
	}
	for _, c := range cases {
		b.Run("path=interceptor/lib="+c.name, func(b *testing.B) {
			var ic grpc.UnaryServerInterceptor
			if c.interceptor != nil {
				ic = c.interceptor(b)
			}
			runGRPCInterceptor(b, ic, mds, c.interceptor != nil)
		})
	}
}

// runGRPCCalls serves the health service with opts and calls Check with
// mds in turn, b.N times in all, failing on any error or, if headers is
// set, on an answer without rate-limit metadata.
func runGRPCCalls(b *testing.B, opts []grpc.ServerOption, mds []metadata.MD, headers bool) {
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis := bufconn.Listen(1 << 20)
	go srv.Serve(lis)
	b.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bench",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	client := healthpb.NewHealthClient(conn)
	ctxs := make([]context.Context, len(mds))
	for i, md := range mds {
		ctxs[i] = metadata.NewOutgoingContext(context.Background(), md)
	}
	req := &healthpb.HealthCheckRequest{}
	var header metadata.MD
	for i := range ctxs {
		if _, err := client.Check(ctxs[i], req, grpc.Header(&header)); err != nil {
			b.Fatal(err)
		}
	}
	if headers && len(header.Get("x-ratelimit-remaining")) == 0 {
		b.Fatalf("no rate-limit metadata: %v", header)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	i := 0
	for range b.N {
		if _, err := client.Check(ctxs[i], req); err != nil {
			b.Fatal(err)
		}
		if i++; i == len(ctxs) {
			i = 0
		}
	}
	reportCPU(b, cpu0)
}

// runGRPCInterceptor calls ic (or, if nil, the handler alone) as a server
// would for a unary call with each of mds in turn.
func runGRPCInterceptor(b *testing.B, ic grpc.UnaryServerInterceptor, mds []metadata.MD, headers bool) {
	stream := &benchTransportStream{method: healthpb.Health_Check_FullMethodName}
	ctxs := make([]context.Context, len(mds))
	for i, md := range mds {
		ctxs[i] = grpc.NewContextWithServerTransportStream(metadata.NewIncomingContext(context.Background(), md), stream)
	}
	info := &grpc.UnaryServerInfo{FullMethod: stream.method}
	answer := &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}
	handler := func(context.Context, any) (any, error) { return answer, nil }
	req := &healthpb.HealthCheckRequest{}
	call := func(i int) {
		stream.header = nil
		var err error
		if ic == nil {
			_, err = handler(ctxs[i], req)
		} else {
			_, err = ic(ctxs[i], req, info, handler)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	for i := range ctxs {
		call(i)
	}
	if headers && len(stream.header.Get("x-ratelimit-remaining")) == 0 {
		b.Fatalf("no rate-limit metadata: %v", stream.header)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	i := 0
	for range b.N {
		call(i)
		if i++; i == len(ctxs) {
			i = 0
		}
	}
	reportCPU(b, cpu0)
}

// benchTransportStream is the server side of a call for grpc.SetHeader: it
// merges header metadata the way gRPC's own transport stream does.
type benchTransportStream struct {
	method string
	header metadata.MD
}

func (s *benchTransportStream) Method() string { return s.method }

func (s *benchTransportStream) SetHeader(md metadata.MD) error {
	s.header = metadata.Join(s.header, md)
	return nil
}

func (s *benchTransportStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }

func (s *benchTransportStream) SetTrailer(metadata.MD) error { return nil }
