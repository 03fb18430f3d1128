package tollgategrpc_test

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	tollgategrpc "github.com/tollgate-go/tollgate/grpc"
)

// serveInMemory serves srv on an in-memory listener and returns a client
// connection to it and a function that stops both.
func serveInMemory(srv *grpc.Server) (*grpc.ClientConn, func()) {
	lis := bufconn.Listen(1 << 16)
	go srv.Serve(lis)
	conn, err := grpc.NewClient("passthrough:///example",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	return conn, func() { conn.Close(); srv.Stop() }
}

func ExampleUnaryServerInterceptor() {
	// Every tenant gets a burst of 2 calls, refilled at 1 a minute.
	plan := tollgate.Plan{Name: "free", Limit: tollgate.Limit{Rate: 1.0 / 60, Burst: 2}}
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
	if err != nil {
		panic(err)
	}

	// The tenant is the x-tenant-id metadata by default. The health
	// service stands in for the application's own.
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(tollgategrpc.UnaryServerInterceptor(l)))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	conn, stop := serveInMemory(srv)
	defer stop()

	client := healthpb.NewHealthClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-tenant-id", "acme")
	for range 3 {
		var header metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
		st := status.Convert(err)
		fmt.Println(st.Code(), header.Get("ratelimit"))
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.RetryInfo); ok {
				fmt.Printf("%s; retry in %v\n", st.Message(), info.GetRetryDelay().AsDuration())
			}
		}
	}
	// Output:
	// OK ["free";r=1;t=60]
	// OK ["free";r=0;t=60]
	// ResourceExhausted ["free";r=0;t=60]
	// rate limit exceeded (free): retry in 60s; retry in 1m0s
}

// The tenant should come from the authenticated principal, which the
// application's authentication interceptor puts in the context; the limiter
// runs after it.
func ExampleTenantFromContext() {
	type tenantKey struct{}
	authenticate := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		// Stands in for checking a token and finding its tenant.
		if v := md.Get("authorization"); len(v) == 1 && v[0] == "Bearer secret-of-acme" {
			ctx = context.WithValue(ctx, tenantKey{}, "acme")
		}
		return next(ctx, req)
	}

	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(tollgate.Plan{Name: "free", Limit: tollgate.Limit{Rate: 2, Burst: 20}}),
		tollgate.WithLogger(nil))
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
		authenticate,
		tollgategrpc.UnaryServerInterceptor(l, tollgategrpc.WithTenant(tollgategrpc.TenantFromContext(tenantKey{}))),
	))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	conn, stop := serveInMemory(srv)
	defer stop()

	client := healthpb.NewHealthClient(conn)
	for _, token := range []string{"Bearer secret-of-acme", "Bearer forged"} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", token)
		var header metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
		fmt.Println(status.Code(err), header.Get("x-ratelimit-remaining"))
	}
	// Output:
	// OK [19]
	// Unauthenticated []
}

// Report exports cost more than reads and draw from a budget of their own
// (the plan says how big); health checks are not limited at all.
func ExampleWithMethodCosts() {
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(tollgate.Plan{Name: "free", Limit: tollgate.Limit{Rate: 2, Burst: 20}}))
	if err != nil {
		panic(err)
	}
	limit := []tollgategrpc.Option{
		tollgategrpc.WithMethodCosts(map[string]int64{
			"/reports.v1.Reports/Export": 10,
			"/search.v1.Search/":         2, // every method of the service
		}),
		tollgategrpc.WithMethodBudgets(map[string]string{"/reports.v1.Reports/Export": "reports"}),
		tollgategrpc.WithSkip(func(_ context.Context, fullMethod string) bool {
			return fullMethod == healthpb.Health_Check_FullMethodName
		}),
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(tollgategrpc.UnaryServerInterceptor(l, limit...)),
		grpc.ChainStreamInterceptor(tollgategrpc.StreamServerInterceptor(l, limit...)),
	)
	_ = srv // register the services, then srv.Serve(listener)
}
