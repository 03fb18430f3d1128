package redisstore

import (
	"fmt"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// Script codes beyond granted (1) and denied (0).
const codeClockOutside = -1000

// decode fills in c's Op from the script's answer v (see opScript) at the
// server's now: Allowed, Delay, Results and Marks.
func (c *call) decode(now int64, v []int64) error {
	op := c.op
	code := v[0]
	if code >= 0 {
		code &= 3
	}
	if code < 0 {
		if code <= codeClockOutside {
			r := int(codeClockOutside - code)
			return fmt.Errorf("%w: Redis's clock is outside the periods around this host's clock for rule %d (quota %v): the clocks disagree by hours",
				tollgate.ErrMisconfigured, r, op.Rules[r-1].Quota)
		}
		r := int(-code)
		return fmt.Errorf("%w: the key %s of rule %d holds a value of another type, not tollgate's state; is another application using the prefix?",
			tollgate.ErrMisconfigured, c.keys[r-1], r)
	}
	n := len(op.Rules)
	if cap(op.Results) >= n {
		op.Results = op.Results[:n]
	} else {
		op.Results = make([]tollgate.Result, n)
	}
	op.Marks = op.Marks[:0]
	op.Allowed, op.Delay = false, 0
	granted := op.Kind == tollgate.OpTake && code == 1
	cost := max(op.Cost, 1)
	var delay int64
	allowed := true
	q := 0
	for i, r := range op.Rules {
		x, y := v[1+i], int64(0)
		if r.IsQuota() {
			x, y = x>>1, x&1
		}
		var res tollgate.Result
		var mark int64
		if !r.IsQuota() {
			interval := r.Limit.TokenInterval()
			tol, need := r.Limit.Burst*interval, cost*interval
			rel := x
			if op.Kind == tollgate.OpReset {
				rel = 0
			}
			wait := rel + need - tol
			if granted {
				ahead := rel + need
				res = tollgate.Result{Allowed: true, Remaining: max(tol-ahead, 0) / interval, ResetAfter: us(ahead)}
				mark = now + ahead
			} else {
				res = tollgate.Result{Allowed: wait <= 0, Remaining: max(tol-rel, 0) / interval,
					RetryAfter: us(max(wait, 0)), ResetAfter: us(rel)}
			}
			if wait > 0 {
				delay = max(delay, wait)
				if wait > min(max(op.MaxDelay, 0), tollgate.MaxWindow).Microseconds() {
					allowed = false
				}
			}
		} else {
			b := c.bounds[q]
			q++
			start, end := b.b0, b.b1
			if y == 1 {
				start, end = b.b1, b.b2
			}
			used := x
			if op.Kind == tollgate.OpReset || op.Kind == tollgate.OpCancel && end <= now {
				// After a reset, or once the period a cancelled
				// reservation counted in has ended, a new period
				// begins.
				used = 0
			}
			left := max(end-now, 0)
			tokens := r.Quota.Tokens
			over := used+cost > tokens
			if over {
				allowed = false
			}
			if granted {
				res = tollgate.Result{Allowed: true, Remaining: max(tokens-used-cost, 0), ResetAfter: us(left)}
				mark = start
			} else {
				res = tollgate.Result{Allowed: !over, Remaining: max(tokens-used, 0)}
				if over {
					res.RetryAfter = us(left)
				}
				if used > 0 {
					res.ResetAfter = us(left)
				}
			}
		}
		op.Results[i] = res
		if granted {
			op.Marks = append(op.Marks, mark)
		}
	}
	switch op.Kind {
	case tollgate.OpTake, tollgate.OpInspect:
		if allowed != (code == 1) {
			return fmt.Errorf("the script and the store disagree on an Op of %d rules (code %d)", n, code)
		}
		op.Allowed = allowed
		if allowed {
			op.Delay = us(delay)
		}
	}
	return nil
}

func us(n int64) time.Duration { return time.Duration(n) * time.Microsecond }
