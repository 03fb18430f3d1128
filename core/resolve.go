package tollgate

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"
)

// A boundedResolver is a PlanResolver of this package that never blocks
// past a deadline it is given, so the Limiter calls it without a goroutine
// of its own.
type boundedResolver interface {
	resolveWithin(ctx context.Context, tenant string, timeout time.Duration) (Plan, error)
}

// errResolverTimeout is the failure of a lookup that overran its bound.
var errResolverTimeout = errors.New("tollgate: the plan resolver did not answer in time")

// resolve finds tenant's plan within the resolver timeout, turning a panic
// of the resolver into an error.
func (l *Limiter) resolve(ctx context.Context, tenant string) (Plan, error) {
	if l.bounded != nil {
		return l.resolveBounded(ctx, tenant)
	}
	return l.resolveAside(ctx, tenant)
}

// A compiledResolver is a PlanResolver of this package whose plans were
// compiled when it was made: a decision takes the compiled plan from it
// and skips the Limiter's plan cache, a quarter of a decision's cost on the
// memory store (docs/performance.md). It cannot fail or block.
type compiledResolver interface {
	// resolveCompiled returns tenant's compiled plan, or nil if the plan
	// did not compile: the Limiter then resolves it as any other, which
	// reports why.
	resolveCompiled(tenant string) *compiledPlan
}

// resolveAside runs a resolver that may ignore its context on a goroutine
// of its own, and stops waiting for it at the deadline. It is apart from
// resolve so that the goroutine's context, which escapes, costs the bounded
// resolvers' requests nothing.
func (l *Limiter) resolveAside(ctx context.Context, tenant string) (Plan, error) {
	ctx, cancel := context.WithTimeout(ctx, l.resolverTimeout)
	defer cancel()
	type answer struct {
		plan Plan
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		p, err := safeResolve(func() (Plan, error) { return l.plans.ResolvePlan(ctx, tenant) })
		done <- answer{p, err}
	}()
	select {
	case a := <-done:
		return a.plan, a.err
	case <-ctx.Done():
		if ctx.Err() == context.DeadlineExceeded {
			return Plan{}, fmt.Errorf("%w (within %v)", errResolverTimeout, l.resolverTimeout)
		}
		return Plan{}, ctx.Err()
	}
}

// resolveBounded calls a resolver of this package, which honours its
// bound, on the request's goroutine. A panic is an error all the same.
func (l *Limiter) resolveBounded(ctx context.Context, tenant string) (p Plan, err error) {
	defer func() {
		if v := recover(); v != nil {
			p, err = Plan{}, panicked(v)
		}
	}()
	return l.bounded.resolveWithin(ctx, tenant, l.resolverTimeout)
}

// safeResolve calls fn and returns a panic in it as an error, with the
// stack, so that a faulty resolver fails a decision, not the process.
func safeResolve(fn func() (Plan, error)) (p Plan, err error) {
	defer func() {
		if v := recover(); v != nil {
			p, err = Plan{}, panicked(v)
		}
	}()
	return fn()
}

func panicked(v any) error {
	return fmt.Errorf("tollgate: the plan resolver panicked: %v\n%s", v, debug.Stack())
}
