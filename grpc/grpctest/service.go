package grpctest

import (
	"context"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate-go/tollgate/core/adapterkit"
	"github.com/tollgate-go/tollgate/core/adaptertest"
)

// The kit's two services. Each has the methods Limited, Costly, Skipped,
// Reports, ByHeader, Held and Slow: Unary's are unary calls that answer
// "ok"; Stream's are server streams that answer StreamMessages messages
// "ok". Slow first does the work its x-slow metadata value says (see
// adaptertest.SlowWork). Requests and answers are
// google.protobuf.StringValue, so no code is generated.
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
	Slow     = "Slow"
)

// Methods lists the kit's methods.
var Methods = []string{Limited, Costly, Skipped, Reports, ByHeader, Held, Slow}

// slowKey is the metadata key whose value Slow hands to its work.
const slowKey = "x-slow"

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

// serviceDescs describes the kit's services; Slow does its work with work.
func serviceDescs(work *adaptertest.SlowWork) []*grpc.ServiceDesc {
	unary := &grpc.ServiceDesc{ServiceName: UnaryService, HandlerType: (*any)(nil)}
	stream := &grpc.ServiceDesc{ServiceName: StreamService, HandlerType: (*any)(nil)}
	for _, m := range Methods {
		var w *adaptertest.SlowWork
		if m == Slow {
			w = work
		}
		unary.Methods = append(unary.Methods, grpc.MethodDesc{MethodName: m, Handler: unaryHandler(FullMethod(UnaryService, m), w)})
		stream.Streams = append(stream.Streams, grpc.StreamDesc{StreamName: m, Handler: streamHandler(w), ServerStreams: true})
	}
	return []*grpc.ServiceDesc{unary, stream}
}

// doWork does what the x-slow metadata of the call asks of work, if any.
func doWork(ctx context.Context, work *adaptertest.SlowWork) {
	if work != nil {
		work.Do(ctx, metadataValue(ctx, slowKey))
	}
}

func metadataValue(ctx context.Context, key string) string {
	if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func unaryHandler(fullMethod string, work *adaptertest.SlowWork) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		answer := func(ctx context.Context, _ any) (any, error) {
			doWork(ctx, work)
			return wrapperspb.String("ok"), nil
		}
		if interceptor == nil {
			return answer(ctx, in)
		}
		return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: fullMethod}, answer)
	}
}

func streamHandler(work *adaptertest.SlowWork) grpc.StreamHandler {
	return func(_ any, stream grpc.ServerStream) error {
		if err := stream.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			return err
		}
		doWork(stream.Context(), work)
		for range StreamMessages {
			if err := stream.SendMsg(wrapperspb.String("ok")); err != nil {
				return err
			}
		}
		return nil
	}
}

// errPanic ends a call whose handler panicked.
var errPanic = status.Error(codes.Internal, "the handler panicked")

// recoverUnary and recoverStream turn a panic of the handler into
// errPanic, as an application's recovery interceptor would: gRPC lets a
// panic end the process.
func recoverUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if recover() != nil {
			resp, err = nil, errPanic
		}
	}()
	return handler(ctx, req)
}

func recoverStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer func() {
		if recover() != nil {
			err = errPanic
		}
	}()
	return handler(srv, ss)
}

// Serve starts a gRPC server with opts behind the kit's authentication,
// serving the kit's services on an in-memory listener, and returns a client
// connection to it. Both are closed in t.Cleanup. A panic of a handler
// ends its call with codes.Internal.
func Serve(t testing.TB, opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	return serve(t, adaptertest.NewSlowWork(), opts...)
}

func serve(t testing.TB, work *adaptertest.SlowWork, opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	// The recovery runs first and the authentication next, as they would
	// in an application.
	opts = append([]grpc.ServerOption{
		grpc.ChainUnaryInterceptor(recoverUnary, authUnary),
		grpc.ChainStreamInterceptor(recoverStream, authStream),
	}, opts...)
	srv := grpc.NewServer(opts...)
	for _, d := range serviceDescs(work) {
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
