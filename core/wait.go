package tollgate

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrWaitExceedsDeadline is wrapped by the error Wait returns at once when
// the request could not proceed before its context's deadline: its tokens
// would come too late, or a quota is exhausted until a later period.
var ErrWaitExceedsDeadline = errors.New("tollgate: the wait would exceed the context's deadline")

// maxWait bounds a Wait without a deadline: longer than any bucket needs to
// refill a request's cost, as a window is at most MaxWindow.
const maxWait = MaxWindow

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
// be decided. If ctx ends during the wait, Wait gives the reserved tokens
// back (see Cancel) and returns ctx's error. When the store fails, the
// failure policy decides at once: FailOpen proceeds, FailClosed returns the
// store's error.
func (l *Limiter) Wait(ctx context.Context, req Request) (Decision, error) {
	req.MaxDelay = maxWait
	for {
		if err := ctx.Err(); err != nil {
			return Decision{Tenant: req.Tenant, Cost: req.Cost}, err
		}
		// The deadline bounds the wait from the decision's time.
		deadline, bounded := ctx.Deadline()
		st := decideState{until: deadline}
		var d Decision
		if err := l.decideWith(ctx, &req, &d, &st); err != nil {
			return d, err
		}
		maxDelay := st.maxDelay
		switch {
		case d.Degraded && !d.Allowed:
			return d, fmt.Errorf("tollgate: Wait: the store failed under FailClosed: %w", d.Err)
		case d.Allowed && d.Delay == 0:
			return d, nil
		case d.Allowed:
			return d, l.Hold(ctx, &d)
		}
		// Denied though the caller would wait: a quota exhausted until a
		// later period, or tokens that come too late.
		if !bounded && d.RetryAfter > 0 && d.policyIsQuota() {
			return d, fmt.Errorf("%w: policy %q is exhausted for %v; give Wait a context with a deadline past that to wait for it",
				ErrWaitExceedsDeadline, d.Policy, d.RetryAfter.Round(time.Second))
		}
		if d.RetryAfter > maxDelay {
			return d, fmt.Errorf("%w: policy %q allows the request in %v, the deadline is in %v",
				ErrWaitExceedsDeadline, d.Policy, d.RetryAfter, maxDelay)
		}
		if err := sleep(ctx, d.RetryAfter); err != nil {
			return d, err
		}
	}
}

// Hold waits out d's Delay, the time its reserved tokens are due (see
// Request.MaxDelay), then moves d to the end of the wait so that its figures
// describe the state the caller proceeds in. If ctx ends first, Hold gives
// the tokens back (see Cancel) and returns ctx's error. A decision without
// a delay returns at once.
func (l *Limiter) Hold(ctx context.Context, d *Decision) error {
	if d.Delay <= 0 {
		return nil
	}
	if err := sleep(ctx, d.Delay); err != nil {
		// The reservation is no use now: give it back, on a context
		// that is still alive.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.storeTimeout)
		_ = l.Cancel(cctx, d)
		cancel()
		return err
	}
	d.waited()
	return nil
}

// policyIsQuota reports whether the policy d's figures describe is a quota.
func (d *Decision) policyIsQuota() bool {
	for _, p := range d.Policies() {
		if p.Name == d.Policy {
			return !p.Quota.IsZero()
		}
	}
	return false
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
// from a Request with MaxDelay) when the caller will not proceed after
// all: all of them if no later request has reserved tokens since, less
// what later reservations depend on otherwise, and none once d's time has
// come, as x/time/rate's Reservation.Cancel does. Cancelling a decision
// without a reservation does nothing.
func (l *Limiter) Cancel(ctx context.Context, d *Decision) error {
	if d.Delay <= 0 || d.rules == nil {
		return nil
	}
	multi := l.multi
	if d.Fallback {
		multi, _ = l.fallback.(MultiStore)
	}
	if multi == nil {
		return nil // a plain store never reserves
	}
	op := ops.Get().(*Op)
	defer ops.Put(op)
	*op = Op{Kind: OpCancel, Key: d.Tenant, Rules: d.rules.rules, Cost: d.Cost, Now: l.now(),
		Deadline: l.deadline(l.now()), Results: op.Results[:0], Marks: append(op.Marks[:0], d.reservedMarks()...)}
	if err := multi.Do(ctx, op); err != nil {
		return err
	}
	d.Delay = 0
	return nil
}
