package grpctest

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// runDelayMode makes bursts of calls to Held as a tenant on adaptertest's
// Free plan (burst 20 at 2/s), with adaptertest.HeldDelay (500ms), on the
// real clock, as the HTTP kit sends requests to GET /held: of 21 calls, 20
// are answered at once and one after about 0.5s, all OK; of 40, the same
// 21 are served and the other 19 refused with ResourceExhausted at once.
// A held call's metadata describes the state after its wait.
func runDelayMode(t *testing.T, service string, newServer NewServer) {
	// Times count from the moment the burst began, before any call
	// reached the server: the held call's token is due 500ms after the
	// first call was decided, so it ends at least 500ms in; the others
	// end at once, which a loaded machine may stretch to nearly that.
	const atOnce, heldAtLeast = 480 * time.Millisecond, 480 * time.Millisecond
	for _, n := range []int{21, 40} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			k := newRealTimeKit(t, service, newServer)
			type timed struct {
				reply
				took time.Duration
				done time.Time
				err  error
			}
			out := make([]timed, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				wg.Go(func() {
					<-start
					r, err := call(k.conn, service, Held, "t-free")
					out[i] = timed{reply: r, done: time.Now(), err: err}
				})
			}
			began := time.Now()
			close(start)
			wg.Wait()
			for i := range out {
				out[i].took = out[i].done.Sub(began)
			}
			var fast, held, denied int
			for i, r := range out {
				switch {
				case r.err != nil:
					t.Errorf("call %d: %v", i, r.err)
				case r.status.Code() == codes.OK && r.took < atOnce:
					fast++
				case r.status.Code() == codes.OK && r.took >= heldAtLeast:
					held++
					k.wantOK(r.reply)
					k.wantHeldFigures(r.reply, r.done)
				case r.status.Code() == codes.ResourceExhausted && r.took < atOnce:
					denied++
				default:
					t.Errorf("call %d: %v after %v", i, r.reply, r.took)
				}
			}
			if fast != 20 || held != 1 || denied != n-21 {
				t.Fatalf("%d at once: %d served at once, %d held and served, %d refused at once; want 20, 1 and %d",
					n, fast, held, denied, n-21)
			}
		})
	}
}

// wantHeldFigures checks the metadata of the held call, served once the
// token it reserved came: the values the HTTP kit wants of the held
// request's headers.
func (k *kit) wantHeldFigures(r reply, done time.Time) {
	k.t.Helper()
	want := map[string]string{
		keyLimit:     "20",
		keyRemaining: "0",
		keyPolicy:    `"free";q=20;w=10`,
		keyRateLimit: `"free";r=0;t=1`,
	}
	for key, v := range want {
		if got := r.header.Get(key); len(got) != 1 || got[0] != v {
			k.t.Errorf("held call: metadata %s = %q, want [%q]", key, got, v)
		}
	}
	full := done.Add(10 * time.Second).Unix()
	got := r.header.Get(keyReset)
	reset, err := strconv.ParseInt(first(got), 10, 64)
	if err != nil || reset < full-1 || reset > full+1 {
		k.t.Errorf("held call: metadata %s = %q, want about %d (10s after it was served)", keyReset, got, full)
	}
	if v := r.header.Get(keyRetry); len(v) > 0 {
		k.t.Errorf("held call: metadata %s = %q on a call that was served", keyRetry, v)
	}
}

func first(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

// runShadowNeverHolds makes 40 calls at once to Held as a tenant on the
// Free plan with every plan in shadow mode: every one is served at once,
// none held, though the delay mode would hold one.
func runShadowNeverHolds(t *testing.T, service string, newServer NewServer) {
	k := newRealTimeKit(t, service, newServer, tollgate.WithShadow())
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			began := time.Now()
			r, err := call(k.conn, service, Held, "t-free")
			if took := time.Since(began); err != nil || r.status.Code() != codes.OK || took >= 400*time.Millisecond {
				t.Errorf("%v %v after %v; want OK at once", r, err, took)
			}
			k.wantNoFigures(r)
		})
	}
	wg.Wait()
}
