// Command grpc is the tollgate example gRPC service, with a client that
// honours RetryInfo.
//
//	go run ./examples/grpc                       # a server on a free loopback port, and the client against it
//	go run ./examples/grpc -serve                # the server alone, on $ADDR (default :50051)
//	go run ./examples/grpc -connect 127.0.0.1:50051 -tenant initech   # the client alone
//	REDIS_URL=redis://127.0.0.1:6379/0 go run ./examples/grpc
//
// The service tollgate.demo.v1.Demo has two unary methods: Hello costs a
// tenant 1 token, CreateReport 10, from the plan and from the reports budget
// (as POST /api/reports in the HTTP examples); the standard health service
// is not limited. The tenant is the x-tenant-id metadata, with the plans of
// the HTTP examples: acme is on the enterprise plan, globex on growth,
// initech on startup, umbrella on trial, anyone else on free. The store is
// in memory unless REDIS_URL is set.
//
// The client calls Hello and CreateReport as one tenant, back to back. A
// call refused with ResourceExhausted carries a google.rpc.RetryInfo detail;
// the client waits the delay it gives and calls again, and prints what it
// saw. The server's JSON log lines, throttled calls among them, go to
// stderr, or to stdout with -serve.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tollgate-go/tollgate/examples/internal/demo"
)

// defaultServeAddr is where -serve listens when ADDR is not set: gRPC's
// customary port.
const defaultServeAddr = ":50051"

func main() {
	serveOnly := flag.Bool("serve", false, "only serve, on $ADDR (default "+defaultServeAddr+"), until interrupted")
	connect := flag.String("connect", "", "only run the client, against the server at this host:port")
	sc := scenario{Out: os.Stdout}
	flag.StringVar(&sc.Tenant, "tenant", "hooli", "the client's tenant")
	flag.IntVar(&sc.Hellos, "hellos", 24, "Hello calls to make")
	flag.IntVar(&sc.Reports, "reports", 1, "CreateReport calls to make")
	flag.DurationVar(&sc.MaxWait, "max-wait", 10*time.Second, "the longest RetryInfo delay the client waits before it gives up a call")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch {
	case *serveOnly:
		err = serve(ctx, demo.NewLogger(), addr(defaultServeAddr), nil)
	case *connect != "":
		err = runClient(ctx, *connect, sc)
	default:
		// The server logs to stderr, so that its lines do not cut
		// through the client's story on stdout.
		logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
		err = serve(ctx, logger, addr("127.0.0.1:0"), func(ctx context.Context, address string) error {
			fmt.Fprintf(sc.Out, "server listening on %s\n", address)
			return runClient(ctx, address, sc)
		})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpc example:", err)
		os.Exit(1)
	}
}

// addr returns $ADDR, or def when it is not set.
func addr(def string) string {
	if a := os.Getenv("ADDR"); a != "" {
		return a
	}
	return def
}

// serve runs the server on address until ctx ends or, if client is not
// nil, until client has run against it.
func serve(ctx context.Context, logger *slog.Logger, address string, client func(ctx context.Context, address string) error) error {
	cfg := demo.ConfigFromEnv()
	// The metrics handler and the upgrade-candidates page (ADMIN_TOKEN)
	// are for HTTP; a gRPC service would serve them on an HTTP port of
	// its own, which this example does without. SHADOW=1 applies as in
	// the HTTP apps.
	limiter, _, _, closeStore, err := demo.NewLimiter(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer closeStore()

	ln, err := demo.Listen(address, logger)
	if err != nil {
		return err
	}
	srv := newServer(limiter)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer srv.GracefulStop()

	if client != nil {
		return client(ctx, ln.Addr().String())
	}
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
		logger.Info("shutting down")
		return nil
	}
}

// runClient plays sc against the server at address.
func runClient(ctx context.Context, address string, sc scenario) error {
	var t tally
	opts := append(sc.dialOptions(&t), grpc.WithTransportCredentials(insecure.NewCredentials()))
	conn, err := grpc.NewClient(address, opts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := sc.run(ctx, conn, &t); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return errors.New("interrupted")
	}
	return nil
}
