package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate-go/tollgate/examples/internal/demo"
)

// retryDelay returns the delay that err's google.rpc.RetryInfo detail asks
// for, if err is a ResourceExhausted status with one.
func retryDelay(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return 0, false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.RetryInfo); ok && info.GetRetryDelay() != nil {
			return info.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// honourRetryInfo returns a client interceptor that calls again a unary
// call refused with ResourceExhausted, after the delay its RetryInfo
// detail gives: the server knows when the tenant's next token arrives, so
// the retry neither comes too early (and is refused again) nor waits longer
// than it must. It makes at most attempts calls, never waits longer than
// maxWait at once (a daily quota may say hours), and never past the call's
// context. onWait, if not nil, hears of each wait before it begins.
func honourRetryInfo(attempts int, maxWait time.Duration, onWait func(method string, err error, delay time.Duration)) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		for attempt := 1; ; attempt++ {
			err := invoke(ctx, method, req, reply, cc, opts...)
			delay, ok := retryDelay(err)
			if !ok || attempt >= attempts || delay > maxWait {
				return err
			}
			if onWait != nil {
				onWait(method, err, delay)
			}
			wait := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				wait.Stop()
				return err
			case <-wait.C:
			}
		}
	}
}

// A scenario is what the demo client does, as one tenant: Hellos calls of
// Hello, then Reports calls of CreateReport, back to back, through a
// connection whose calls honour RetryInfo.
type scenario struct {
	Tenant  string
	Hellos  int
	Reports int
	MaxWait time.Duration // the longest RetryInfo delay the client waits
	Out     io.Writer
}

// tally counts what the client saw.
type tally struct {
	call                string // the call under way, for the wait lines
	done, failed, waits int
	waited              time.Duration
}

// dialOptions returns the client's dial options: the retry interceptor,
// which reports its waits to out and counts them in t.
func (sc scenario) dialOptions(t *tally) []grpc.DialOption {
	onWait := func(_ string, err error, delay time.Duration) {
		t.waits++
		t.waited += delay
		fmt.Fprintf(sc.Out, "  %-15s %s: %s; waiting %v, as its RetryInfo says\n", t.call, status.Code(err), status.Convert(err).Message(), delay)
	}
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(honourRetryInfo(5, sc.MaxWait, onWait))}
}

// run plays the scenario on conn, which must have been dialled with
// sc.dialOptions(t).
func (sc scenario) run(ctx context.Context, conn *grpc.ClientConn, t *tally) error {
	plan, err := demo.PlanOf(sc.Tenant)
	if err != nil {
		return err
	}
	out := sc.Out

	// No tenant: health checks pass, the demo service refuses.
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	fmt.Fprintf(out, "  %-15s no tenant: %s (not limited)\n", "Check", h.GetStatus())
	err = conn.Invoke(ctx, helloMethod, wrapperspb.String(""), new(wrapperspb.StringValue))
	fmt.Fprintf(out, "  %-15s no tenant: %s: %s\n", "Hello", status.Code(err), status.Convert(err).Message())

	fmt.Fprintf(out, "as tenant %s, on plan %q (burst %d, %g tokens/s): %d x Hello (1 token), %d x CreateReport (%d tokens)\n",
		sc.Tenant, plan.Name, plan.Limit.Burst, plan.Limit.Rate, sc.Hellos, sc.Reports, demo.ReportCost)
	ctx = metadata.AppendToOutgoingContext(ctx, demo.TenantHeader, sc.Tenant)
	call := func(method string, n int) {
		name := fmt.Sprintf("%s %d", shortName(method), n)
		t.call = name
		var header metadata.MD
		reply := new(wrapperspb.StringValue)
		err := conn.Invoke(ctx, method, wrapperspb.String(""), reply, grpc.Header(&header))
		if err != nil {
			t.failed++
			fmt.Fprintf(out, "  %-15s %s: %s (given up)\n", name, status.Code(err), status.Convert(err).Message())
			return
		}
		t.done++
		fmt.Fprintf(out, "  %-15s OK %q, ratelimit: %s\n", name, reply.GetValue(), first(header.Get("ratelimit")))
	}
	for i := 1; i <= sc.Hellos; i++ {
		call(helloMethod, i)
	}
	for i := 1; i <= sc.Reports; i++ {
		call(createReportMethod, i)
	}
	fmt.Fprintf(out, "done: %d calls answered, %d given up; %d refusals retried after their RetryInfo delay (%v waited)\n",
		t.done, t.failed, t.waits, t.waited)
	return nil
}

// shortName returns the method name of a full method name.
func shortName(fullMethod string) string {
	return fullMethod[strings.LastIndexByte(fullMethod, '/')+1:]
}

func first(v []string) string {
	if len(v) == 0 {
		return "(none)"
	}
	return v[0]
}
