package tollgate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tollgate-go/tollgate/core/storekit"
)

// ErrWaitExceedsDeadline is wrapped by the error Wait returns at once when
// the request could not proceed before its context's deadline: its tokens
// would come too late, or a quota is exhausted until a later period.
var ErrWaitExceedsDeadline = errors.New("tollgate: the wait would exceed the context's deadline")

// Wait blocks until req may proceed, like Take but patient: a token bucket
// short of tokens reserves them (see Request.MaxDelay) and Wait sleeps until
// they are due; a quota exhausted for the period is waited for only if the
// context's deadline allows it. Reservations are granted in order of
// arrival, so callers of Wait on every replica that shares the store are
// served first come, first served, and together never exceed the rate.
//
// Wait returns the Decision it proceeded on, moved to the end of its wait.
// It fails at once, having taken nothing, with an error wrapping
// ErrWaitExceedsDeadline when the request could not proceed before ctx's
// deadline, and with the errors Take returns for a request that can never
// be decided. If ctx ends during the wait, Wait returns ctx's error at once
// and the reserved tokens are given back (see Cancel). When the store
// fails, the failure policy decides at once: fail-open proceeds,
// fail-closed returns the store's error. A plan in shadow mode never waits.
func (l *Limiter) Wait(ctx context.Context, req Request) (Decision, error) {
	if l == nil {
		return Decision{Tenant: req.Tenant}, errNilLimiter
	}
	c := calls.Get().(*call)
	err := l.wait(ctx, req, &c.decision, &c.op)
	out := c.decision
	calls.Put(c)
	return out, err
}

// wait is Wait into d, asking the store with op.
func (l *Limiter) wait(ctx context.Context, req Request, d *Decision, op *storekit.Op) error {
	req.MaxDelay = maxWindow
	var turn chan struct{} // the request's place in line for a slot
	var leave func()
	defer func() {
		if leave != nil {
			leave()
		}
	}()
	*d = Decision{}
	// Observers hear of the last attempt only: a request that waits is
	// one request.
	attempted, observed := false, false
	defer func() {
		if attempted && !observed {
			l.observe(ctx, d)
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			if d.Tenant == "" {
				d.Tenant = req.Tenant
			}
			return err
		}
		deadline, bounded := ctx.Deadline()
		attempted = true
		if err := l.attempt(ctx, &req, d, op, deadline); err != nil {
			return err
		}
		switch {
		case d.Degraded && !d.Allowed:
			return fmt.Errorf("tollgate: Wait: the store failed under fail-closed: %w", d.Err)
		case d.Allowed:
			l.observe(ctx, d)
			observed = true
			return l.Hold(ctx, d)
		case d.slotsOnly():
			// Every other policy allows it: wait in line for a slot,
			// which frees when a request of the tenant ends.
			if turn == nil {
				turn, leave = l.queueForSlot(req.Tenant)
			}
			if err := l.waitForSlot(ctx, req.Tenant, turn); err != nil {
				return err
			}
			continue
		}
		// Denied though the caller would wait: a quota exhausted until a
		// later period, or tokens that come too late.
		if !bounded && d.policyIsQuota() {
			return fmt.Errorf("%w: policy %q is exhausted for %v; give Wait a context with a deadline past that to wait for it",
				ErrWaitExceedsDeadline, d.Policy, d.RetryAfter.Round(time.Second))
		}
		if bounded && d.RetryAfter > time.Until(deadline) {
			return fmt.Errorf("%w: policy %q allows the request in %v, the deadline is in %v",
				ErrWaitExceedsDeadline, d.Policy, d.RetryAfter, time.Until(deadline).Round(time.Millisecond))
		}
		if err := sleep(ctx, d.RetryAfter); err != nil {
			return err
		}
	}
}

// Hold waits out d's Delay, the time its reserved tokens are due (see
// Request.MaxDelay), then moves d to the end of the wait so that its figures
// describe the state the caller proceeds in. If ctx ends first, Hold returns
// ctx's error at once and gives the tokens back in the background (see
// Cancel). A decision without a delay returns at once.
func (l *Limiter) Hold(ctx context.Context, d *Decision) error {
	if d.Delay <= 0 {
		return nil
	}
	if err := sleep(ctx, d.Delay); err != nil {
		if l != nil {
			// The reservation is of no use now: give it back, without
			// making the caller wait for the store.
			reserved := *d
			go func() { _ = l.Cancel(context.WithoutCancel(ctx), &reserved) }()
		}
		return err
	}
	d.waited()
	return nil
}

// sleep waits d or until ctx is done, and returns ctx's error then.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Cancel gives back the tokens that d reserved (a Decision with a Delay,
// from a Request with MaxDelay) when the caller will not proceed after all,
// unless d's time has come. When every waiter of a tenant gives up, the
// tenant owes nothing for them, in whatever order they cancel. Cancelling a
// decision without a reservation does nothing.
func (l *Limiter) Cancel(ctx context.Context, d *Decision) error {
	if l == nil {
		return errNilLimiter
	}
	if d.Delay <= 0 || d.rules == nil {
		return nil
	}
	op := ops.Get().(*storekit.Op)
	defer ops.Put(op)
	*op = storekit.Op{Kind: storekit.Cancel, Tenant: d.Tenant, Rules: d.rules.rules, Cost: d.Cost, Now: l.now(),
		Mark: d.mark, Lease: d.lease, Results: op.Results[:0]}
	if err := l.storeOf(d).Do(ctx, op); err != nil {
		return err
	}
	d.Delay = 0
	if d.lease != "" {
		// The Cancel gave the slot back too.
		l.forget(d)
	}
	l.releaseHeld(d)
	return nil
}
