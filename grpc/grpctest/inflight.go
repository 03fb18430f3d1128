package grpctest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"

	"github.com/tollgate-go/tollgate/core/adapterkit"
	"github.com/tollgate-go/tollgate/core/adaptertest"
)

// stressFor is how long NoLeak makes calls, for each service.
const stressFor = 2 * time.Second

// slotsPolicy is the ratelimit-policy of adaptertest's plan Slots.
const slotsPolicy = `"slots";q=100000;w=1, "slots-inflight";q=3;qu="concurrent-requests"`

// hold starts a call of Slow as t-slots that waits in the handler until
// the gate id opens, waits until it is there, and returns where its reply
// will come.
func (k *kit) hold(id string) <-chan reply {
	k.t.Helper()
	out := make(chan reply, 1)
	go func() {
		r, err := callWith(context.Background(), k.conn, k.service, Slow, "t-slots", "hold:"+id)
		if err != nil {
			k.t.Error(err)
		}
		out <- r
	}()
	k.waitFor(func() bool { return k.work.Entered(id) }, "call "+id+" in the handler")
	return out
}

// waitFor polls cond until it holds, failing after 10 seconds: what it
// waits for happens on the server's goroutines.
func (k *kit) waitFor(cond func() bool, what string) {
	k.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			k.t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitIdle waits until no call is in the handler and no slot is held.
func (k *kit) waitIdle() {
	k.t.Helper()
	k.waitFor(func() bool {
		return k.work.Now() == 0 && k.limiter.SlotsHeld()[adaptertest.Slots.Name] == 0
	}, "every slot back")
}

// wantInFlightRefusal checks that r was refused for want of a slot:
// ResourceExhausted, a RetryInfo of the estimated second, a QuotaFailure
// naming the in-flight policy with its unit and slots, and the metadata of
// the HTTP answer.
func (k *kit) wantInFlightRefusal(r reply) {
	k.t.Helper()
	k.wantCode(r, codes.ResourceExhausted)
	k.wantRetry(r, 1)
	var failures []*errdetails.QuotaFailure
	for _, d := range r.status.Details() {
		if qf, ok := d.(*errdetails.QuotaFailure); ok {
			failures = append(failures, qf)
		}
	}
	if len(failures) != 1 || len(failures[0].GetViolations()) != 1 {
		k.t.Fatalf("QuotaFailure details %v, want one with one violation", failures)
	}
	v := failures[0].GetViolations()[0]
	if v.GetQuotaId() != "slots-inflight" || v.GetQuotaMetric() != adapterkit.UnitConcurrentRequests ||
		v.GetQuotaValue() != adaptertest.SlotsInFlight || v.GetSubject() != "tenant" || v.GetDescription() == "" {
		k.t.Errorf("violation %v, want slots-inflight, %s, %d slots, of the tenant", v, adapterkit.UnitConcurrentRequests, adaptertest.SlotsInFlight)
	}
	if got := r.header.Get(keyPolicy); len(got) != 1 || got[0] != slotsPolicy {
		k.t.Errorf("%s = %q, want [%q]", keyPolicy, got, slotsPolicy)
	}
	if got := r.header.Get(keyRateLimit); len(got) != 1 || !strings.HasSuffix(got[0], `, "slots-inflight";r=0`) {
		k.t.Errorf("%s = %q, want the in-flight policy with r=0 and no t", keyRateLimit, got)
	}
	if !strings.Contains(r.status.Message(), adapterkit.UnitConcurrentRequests) {
		k.t.Errorf("message %q does not state the unit", r.status.Message())
	}
}

// wantAllSlotsFree checks, through the store, that every slot is free:
// SlotsInFlight calls enter the handler at once, and one more is refused.
// It leaves nothing held.
func (k *kit) wantAllSlotsFree() {
	k.t.Helper()
	var held []<-chan reply
	var ids []string
	for i := range adaptertest.SlotsInFlight {
		id := fmt.Sprintf("free-%d-%d", k.work.Calls(), i)
		held, ids = append(held, k.hold(id)), append(ids, id)
	}
	k.wantInFlightRefusal(k.call(Slow, "t-slots"))
	for _, id := range ids {
		k.work.Open(id)
	}
	for _, r := range held {
		k.wantOK(<-r)
	}
	k.waitIdle()
}

// runInFlight checks the in-flight policy of adaptertest's plan Slots
// through Slow: a call holds its slot until its handler returns (a
// stream's, until the stream ends), whether it returns, panics or is
// cancelled.
func runInFlight(t *testing.T, service string, newServer NewServer) {
	t.Run("Refusal", func(t *testing.T) {
		k := newKit(t, service, newServer, nil)
		k.wantAllSlotsFree()
		if got := k.work.Calls(); got != adaptertest.SlotsInFlight {
			t.Errorf("the handler was called %d times, want %d: the refused call reached it", got, adaptertest.SlotsInFlight)
		}
	})

	t.Run("BackAfterPanic", func(t *testing.T) {
		k := newKit(t, service, newServer, nil)
		for i := range adaptertest.SlotsInFlight + 2 {
			r, err := callWith(context.Background(), k.conn, service, Slow, "t-slots", "panic:0")
			if err != nil || r.status.Code() != codes.Internal {
				t.Fatalf("a handler that panicked: %v, %v; want Internal", r, err)
			}
			k.waitIdle()
			if got := k.work.Calls(); got != int64(i+1) {
				t.Fatalf("%d calls reached the handler after %d: a slot is still held", got, i+1)
			}
		}
		k.wantAllSlotsFree()
	})

	t.Run("BackAfterCancel", func(t *testing.T) {
		k := newKit(t, service, newServer, nil)
		for i := range adaptertest.SlotsInFlight + 1 {
			id := "c" + strconv.Itoa(i)
			ctx, cancel := context.WithCancel(context.Background())
			out := make(chan reply, 1)
			go func() {
				r, _ := callWith(ctx, k.conn, service, Slow, "t-slots", "hold:"+id)
				out <- r
			}()
			k.waitFor(func() bool { return k.work.Entered(id) }, "the call in the handler")
			cancel()
			if r := <-out; r.status.Code() != codes.Canceled {
				t.Fatalf("a cancelled call: %v, want Canceled", r)
			}
			// The handler's context ends with the call: the handler
			// returns, and the slot comes back, with no gate opened.
			k.waitIdle()
			k.work.Open(id)
		}
		k.wantAllSlotsFree()
	})

	t.Run("NoLeak", func(t *testing.T) {
		k := newKit(t, service, newServer, nil)
		var mu sync.Mutex
		var calls, ok, refused, panicked, cancelled int
		stop := time.Now().Add(stressFor)
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for time.Now().Before(stop) {
					pause := strconv.Itoa(rand.IntN(2000))
					ctx, how := context.Background(), "pause:"+pause
					cancel := func() {}
					switch rand.IntN(5) {
					case 0:
						how = "panic:" + pause
					case 1:
						ctx, cancel = context.WithTimeout(ctx, time.Duration(rand.IntN(3000))*time.Microsecond)
					}
					r, err := callWith(ctx, k.conn, service, Slow, "t-slots", how)
					cancel()
					mu.Lock()
					calls++
					switch code := r.status.Code(); {
					case err != nil && ctx.Err() != nil:
						cancelled++ // the stream could not even open
					case err != nil:
						t.Error(err)
					case code == codes.OK:
						ok++
					case code == codes.ResourceExhausted:
						refused++
					case code == codes.Internal && strings.HasPrefix(how, "panic"):
						panicked++
					case code == codes.Canceled || code == codes.DeadlineExceeded:
						cancelled++
					default:
						t.Errorf("%v", r)
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		k.waitIdle()
		t.Logf("%d calls in %v (%d served, %d refused, %d panicked, %d cancelled); at most %d in the handler at once",
			calls, stressFor, ok, refused, panicked, cancelled, k.work.Most())
		if most := k.work.Most(); most > adaptertest.SlotsInFlight {
			t.Errorf("%d calls in the handler at once, over the limit of %d", most, adaptertest.SlotsInFlight)
		}
		k.wantAllSlotsFree()
	})
}
