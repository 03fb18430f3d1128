package redisstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core/storekit"
)

// The call path. A caller encodes its Op as the script's arguments, queues
// it on the endpoint of the server that holds its tenant, and waits for
// the answer or for its own context, with no timer of its own. Up to
// maxRunners runner goroutines per endpoint each take everything queued and
// send it in one write: one pipeline of script calls, each carrying up to
// opsPerScript Ops, one round trip for all of them. The runners' client has
// the store's timeout as its read timeout, so the deadline that fails a call
// starts when its command has been written: neither the wait in the queue,
// nor getting a connection (which has a budget of its own, and which Check
// does ahead of the first requests), nor a reader or a writer that the
// scheduler runs late (see dialHook) counts against it. Only a Redis that
// has not answered within the timeout of the write fails a call, and only
// such failures, counted per round trip, open the circuit breaker; an open
// breaker fails the calls still queued, and new ones, at once.
//
// A caller that gives up abandons its call, which is then not sent if it
// was still queued, save a Release or a Cancel (keep), which gives back
// what a request held and goes out all the same. A Take abandoned after it
// went out that Redis granted a slot of an in-flight cap is released by
// the runner that reads the answer, as no one else holds the slot.

// maxRunners bounds the round trips in flight to one server, and so the
// connections the Store holds to it. maxBatch bounds the Ops one round
// trip carries, and maxQueued the Ops that may wait for one: beyond it a
// call fails at once rather than queue without bound behind a slow Redis.
// opsPerScript bounds the Ops of one script call, so that a script never
// keeps Redis from its other clients for long.
const (
	maxRunners   = 4
	maxBatch     = 512
	maxQueued    = 1 << 16
	opsPerScript = 32
)

// connectBudget bounds the time a round trip may spend getting a
// connection (dialling, the handshake, a wait for the pool) before its
// write, so that a Redis that cannot be reached fails its calls after it
// rather than after go-redis's dial timeout and retries: twenty timeouts,
// and at least minConnectBudget, as a saturated CPU may keep a round trip
// from running for a good part of a second.
func connectBudget(timeout time.Duration) time.Duration {
	return max(20*timeout, minConnectBudget)
}

const minConnectBudget = time.Second

// A call is one Op on its way to Redis. The caller alone reads and writes
// the Op; the runner sees only the Op's arguments to the script and writes
// back its reply, so a caller that gives up may reuse its Op at once.
type call struct {
	key  string   // the hash of the Op's tenant
	sets []string // the sorted sets of its in-flight caps
	args []any    // the Op's part of the script's ARGV
	keep bool     // sent even if its caller gives up

	state atomic.Int32
	done  chan struct{} // one send per answer, so a call can be reused

	// Written by the runner before it sends on done.
	now      int64 // Redis's time, µs
	reply    []any // the Op's part of the script's reply
	err      error
	latency  time.Duration // the round trip's
	received time.Time     // when the reply was read
}

// A call's state: whoever moves it on from callQueued or callSent owns it.
const (
	callQueued int32 = iota
	callSent
	callDone
	callAbandoned // its caller gave up: no one will read its answer
)

var calls = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// answer hands c's reply or err to its caller, unless the caller gave up,
// and reports whether it did.
func (c *call) answer(from int32) bool {
	if c.state.CompareAndSwap(from, callDone) {
		c.done <- struct{}{}
		return true
	}
	return false
}

// onceCmd is a command that go-redis must not send again after a failed
// round trip: a script call that may have run (a Take must not take
// twice), or a command of Check, which fails rather than wait for retries.
type onceCmd struct{ *redis.Cmd }

func (onceCmd) NoRetry() bool { return true }

// An endpoint is one Redis server: its client, its queue of calls, its
// runners and its circuit breaker.
type endpoint struct {
	store   *Store
	client  *redis.Client // shares the caller's pool, with the store's timeout
	perCmd  int           // Ops per script call: 1 on a cluster, whose keys differ in slot
	breaker breaker

	mu      sync.Mutex
	queue   []*call
	runners int
}

func (s *Store) newEndpoint(c *redis.Client, perCmd int) *endpoint {
	// The hook goes on c, whose pool dials the connections, and so serves
	// its other commands too: a reply that has arrived is read.
	c.AddHook(dialHook{})
	e := &endpoint{store: s, client: c.WithTimeout(s.timeout), perCmd: perCmd}
	e.breaker.init(s.failures, s.backoff, s.timeout+connectBudget(s.timeout))
	return e
}

// do sends c and waits for its answer or for ctx. It returns nil once c
// holds Redis's reply. If ctx ends first, do returns its error at once, and
// the runner sends c only if it keeps it (c.keep) or has sent it already.
func (e *endpoint) do(ctx context.Context, c *call) error {
	if !e.breaker.allow(time.Now()) {
		return unavailable("circuit_open", errCircuitOpen)
	}
	if err := e.enqueue(c); err != nil {
		return err
	}

	select {
	case <-c.done:
	case <-ctx.Done():
		kind := "canceled"
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			kind = "deadline"
		}
		if c.keep {
			return unavailable(kind, ctx.Err()) // a runner sends it all the same
		}
		if c.state.CompareAndSwap(callQueued, callAbandoned) || c.state.CompareAndSwap(callSent, callAbandoned) {
			return unavailable(kind, ctx.Err())
		}
		<-c.done // answered meanwhile
	}
	return c.err
}

// enqueue queues c for a runner, and starts one if fewer than maxRunners
// run.
func (e *endpoint) enqueue(c *call) error {
	c.reply, c.err = nil, nil
	c.state.Store(callQueued)
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.queue) >= maxQueued {
		return unavailable("queue_full", errQueueFull)
	}
	e.queue = append(e.queue, c)
	if e.runners < maxRunners {
		e.runners++
		go e.run()
	}
	return nil
}

// run sends what is queued, one round trip at a time, until the queue is
// empty.
func (e *endpoint) run() {
	var batch []*call
	for {
		e.mu.Lock()
		n := min(len(e.queue), maxBatch)
		if n == 0 {
			e.runners--
			e.mu.Unlock()
			return
		}
		batch = append(batch[:0], e.queue[:n]...)
		rest := copy(e.queue, e.queue[n:])
		clear(e.queue[rest:])
		e.queue = e.queue[:rest]
		e.mu.Unlock()
		e.roundTrip(batch)
		clear(batch)
	}
}

// A scriptCall is one call of the script and the Ops it carries.
type scriptCall struct {
	cmd   onceCmd
	calls []*call
}

// roundTrip sends the calls of batch whose callers still wait, in one
// pipeline, and answers them. Script calls that Redis does not know the
// script for (a restarted server) are sent again once it is loaded.
func (e *endpoint) roundTrip(batch []*call) {
	sent := batch[:0]
	for _, c := range batch {
		if c.state.CompareAndSwap(callQueued, callSent) {
			sent = append(sent, c)
		}
	}
	if len(sent) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.store.timeout+connectBudget(e.store.timeout))
	defer cancel()
	scripts := e.scriptCalls(ctx, sent)
	for attempt := 0; len(scripts) > 0; attempt++ {
		pipe := e.client.Pipeline()
		for i := range scripts {
			_ = pipe.Process(ctx, scripts[i].cmd)
		}
		start := time.Now()
		_, execErr := pipe.Exec(ctx)
		received := time.Now()
		wall := e.store.wall()
		failed := false
		missing := scripts[:0]
		for _, sc := range scripts {
			err := replyError(sc.cmd, execErr)
			if isNoScript(err) && attempt == 0 {
				missing = append(missing, sc)
				continue
			}
			failed = failed || (err != nil && !isReply(err))
			e.answer(ctx, sc, err, received.Sub(start), wall)
		}
		e.breaker.record(time.Now(), !failed)
		if failed && e.breaker.isOpen() {
			e.failQueued()
		}
		if len(missing) == 0 {
			return
		}
		if err := e.client.ScriptLoad(ctx, e.store.script.src).Err(); err != nil {
			for _, sc := range missing {
				e.answer(ctx, sc, err, received.Sub(start), wall)
			}
			return
		}
		scripts = missing
		for i := range scripts {
			scripts[i].cmd = onceCmd{redis.NewCmd(ctx, scripts[i].cmd.Args()...)}
		}
	}
}

// scriptCalls groups calls into script calls of up to e.perCmd Ops.
func (e *endpoint) scriptCalls(ctx context.Context, calls []*call) []scriptCall {
	clock := ""
	if e.store.clock != nil {
		clock = stamp(e.store.clock().UnixMicro())
	}
	out := make([]scriptCall, 0, (len(calls)+e.perCmd-1)/e.perCmd)
	for len(calls) > 0 {
		group := calls[:min(len(calls), e.perCmd)]
		calls = calls[len(group):]
		keys := 0
		for _, c := range group {
			keys += 1 + len(c.sets)
		}
		size := 4 + keys
		for _, c := range group {
			size += len(c.args)
		}
		args := make([]any, 0, size)
		args = append(args, "evalsha", e.store.script.sha, keys)
		for _, c := range group {
			args = append(args, c.key)
			for _, set := range c.sets {
				args = append(args, set)
			}
		}
		args = append(args, clock)
		for _, c := range group {
			args = append(args, c.args...)
		}
		out = append(out, scriptCall{cmd: onceCmd{redis.NewCmd(ctx, args...)}, calls: group})
	}
	return out
}

// answer hands each call of sc its part of the reply, or err.
func (e *endpoint) answer(ctx context.Context, sc scriptCall, err error, latency time.Duration, received time.Time) {
	var vals []any
	if err == nil {
		vals, _ = sc.cmd.Val().([]any)
		if len(vals) != 2+len(sc.calls) {
			err = errors.New("redisstore: the script's reply is malformed")
		}
	}
	for i, c := range sc.calls {
		c.latency, c.received = latency, received
		if err != nil {
			c.err = e.store.callError(ctx, c.key, err)
		} else {
			sec, _ := vals[0].(int64)
			usec, _ := vals[1].(int64)
			c.now = sec*1e6 + usec
			c.reply, _ = vals[2+i].([]any)
		}
		if !c.answer(callSent) && c.grantedSlot() {
			e.releaseOrphan(c)
		}
	}
}

// grantedSlot reports whether c, whose reply has come, is a Take that
// Redis granted a slot of an in-flight cap.
func (c *call) grantedSlot() bool {
	kind, _ := c.args[0].(int64)
	if c.err != nil || len(c.sets) == 0 || storekit.Kind(kind) != storekit.Take || len(c.reply) < 2 {
		return false
	}
	flag, _ := c.reply[0].(int64)
	allowed, _ := c.reply[1].(int64)
	return flag == 0 && allowed == 1
}

// releaseOrphan releases the slot of c, a Take granted after its caller
// gave up: no one holds it, and no one would release it before its lease
// ends. The runner owns an abandoned call, and sends it again as the
// Release of its lease, to be answered to no one.
func (e *endpoint) releaseOrphan(c *call) {
	c.args[0] = int64(storekit.Release)
	_ = e.enqueue(c) // with the queue full, the lease expires
}

// replyError returns the error of cmd after a pipeline whose Exec
// returned execErr. go-redis leaves a command without an error when the
// connection's handshake failed with an error reply (a wrong password, a
// database that does not exist): its error is then Exec's.
func replyError(cmd onceCmd, execErr error) error {
	if err := cmd.Err(); err != nil || cmd.Val() != nil {
		return err
	}
	if execErr == nil {
		execErr = errors.New("redisstore: no reply")
	}
	return execErr
}

// failQueued answers every queued call with the open breaker's error.
func (e *endpoint) failQueued() {
	e.mu.Lock()
	queued := e.queue
	e.queue = nil
	e.mu.Unlock()
	for _, c := range queued {
		c.err = unavailable("circuit_open", errCircuitOpen)
		c.answer(callQueued)
	}
}
