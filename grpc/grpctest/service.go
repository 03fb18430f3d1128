package grpctest

import (
	"context"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate-go/tollgate/core/adapterkit"
)

// The kit's two services. Each has the methods Limited, Costly, Skipped,
// Reports, ByHeader and Held: Unary's are unary calls that answer "ok"; Stream's
// are server streams that answer StreamMessages messages "ok". Requests and
// answers are google.protobuf.StringValue, so no code is generated.
const (
	UnaryService  = "tollgate.grpctest.Unary"
	StreamService = "tollgate.grpctest.Stream"
)

// The kit's methods, by their short name; FullMethod names them in a
// service.
const (
	Limited  = "Limited"
	Costly   = "Costly"
	Skipped  = "Skipped"
	Reports  = "Reports"
	ByHeader = "ByHeader"
	Held     = "Held"
)

// Methods lists the kit's methods.
var Methods = []string{Limited, Costly, Skipped, Reports, ByHeader, Held}

// Services lists the kit's services.
var Services = []string{UnaryService, StreamService}

// StreamMessages is how many messages each Stream method sends.
const StreamMessages = 3

// FullMethod returns the full method name of method in service, such as
// "/tollgate.grpctest.Unary/Limited".
func FullMethod(service, method string) string {
	return "/" + service + "/" + method
}

// TenantKey is the context key under which the kit's authentication stores
// the tenant: the limited methods read it with the adapter's
// TenantFromContext(TenantKey{}).
type TenantKey struct{}

// binaryTenantKey carries tenants that are not valid in a text metadata
// value (non-ASCII, control characters, surrounding spaces).
var binaryTenantKey = tenantKey + "-bin"

// tenantKey is the metadata key of the tenant, as the adapters' default.
var tenantKey = strings.ToLower(adapterkit.TenantHeader)

// authenticated returns ctx with the tenant of its incoming metadata stored
// under TenantKey, as an application's authentication interceptor stores
// the authenticated principal's.
func authenticated(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, key := range []string{tenantKey, binaryTenantKey} {
		if v := md.Get(key); len(v) > 0 && v[0] != "" {
			return context.WithValue(ctx, TenantKey{}, v[0])
		}
	}
	return ctx
}

func authUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	return handler(authenticated(ctx), req)
}

func authStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &contextStream{ServerStream: ss, ctx: authenticated(ss.Context())})
}

// contextStream is a ServerStream with another context.
type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *contextStream) Context() context.Context { return s.ctx }

func serviceDescs() []*grpc.ServiceDesc {
	unary := &grpc.ServiceDesc{ServiceName: UnaryService, HandlerType: (*any)(nil)}
	stream := &grpc.ServiceDesc{ServiceName: StreamService, HandlerType: (*any)(nil)}
	for _, m := range Methods {
		unary.Methods = append(unary.Methods, grpc.MethodDesc{MethodName: m, Handler: unaryHandler(FullMethod(UnaryService, m))})
		stream.Streams = append(stream.Streams, grpc.StreamDesc{StreamName: m, Handler: streamHandler, ServerStreams: true})
	}
	return []*grpc.ServiceDesc{unary, stream}
}

func unaryHandler(fullMethod string) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		answer := func(context.Context, any) (any, error) { return wrapperspb.String("ok"), nil }
		if interceptor == nil {
			return answer(ctx, in)
		}
		return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: fullMethod}, answer)
	}
}

func streamHandler(_ any, stream grpc.ServerStream) error {
	if err := stream.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		return err
	}
	for range StreamMessages {
		if err := stream.SendMsg(wrapperspb.String("ok")); err != nil {
			return err
		}
	}
	return nil
}

// Serve starts a gRPC server with opts behind the kit's authentication,
// serving the kit's services on an in-memory listener, and returns a client
// connection to it. Both are closed in t.Cleanup.
func Serve(t testing.TB, opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	// The authentication runs first, as it would in an application.
	opts = append([]grpc.ServerOption{grpc.ChainUnaryInterceptor(authUnary), grpc.ChainStreamInterceptor(authStream)}, opts...)
	srv := grpc.NewServer(opts...)
	for _, d := range serviceDescs() {
		srv.RegisterService(d, struct{}{})
	}
	lis := bufconn.Listen(1 << 20)
	// Serve returns when the cleanup stops the server; it has nothing to say.
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///grpctest",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
	})
	return conn
}
