package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/storekit"
)

// DefaultTimeout is how long a Store waits for Redis's answer to a command
// it has written, unless WithTimeout says otherwise.
const DefaultTimeout = 50 * time.Millisecond

// The circuit breaker's defaults: it opens after this many round trips in a
// row fail, and lets a probe through after this long.
const (
	defaultBreakerFailures = 5
	defaultBreakerBackoff  = 500 * time.Millisecond
)

// An Option configures a Store.
type Option func(*config)

type config struct {
	prefix   string
	timeout  time.Duration
	failures int
	backoff  time.Duration
	logger   *slog.Logger

	// Set by tests (export_test.go).
	clock  func() time.Time // the script's time instead of Redis's TIME
	wall   func() time.Time // the process's time instead of time.Now
	script string           // the script's source instead of apply.lua
}

// WithPrefix sets the prefix of every key the Store writes (default
// DefaultPrefix). It must not contain '{' or '}', which would put every
// tenant in the same Redis Cluster slot.
func WithPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// WithTimeout sets how long the Store waits for Redis to answer a command,
// counted from when the command was written to the connection (default
// DefaultTimeout). Time a call spends queued in the process does not
// count, nor does getting a connection, which has a budget of its own
// (twenty timeouts, at least a second): only Redis's silence fails a call.
// It is the store's only timeout; the Limiter sets none.
func WithTimeout(d time.Duration) Option {
	return func(c *config) { c.timeout = d }
}

// WithCircuitBreaker sets the circuit breaker: after failures round trips
// in a row to one Redis server fail (no answer within the timeout, a
// connection that cannot be made or breaks), the Store stops calling that
// server for backoff and answers its calls at once with an error of kind
// "circuit_open"; then one call goes through as a probe, and the breaker
// closes if Redis answers it. Answers that report a misconfiguration count
// as answers. failures < 1 turns the breaker off. The defaults are 5
// failures and 500 ms.
func WithCircuitBreaker(failures int, backoff time.Duration) Option {
	return func(c *config) { c.failures, c.backoff = failures, backoff }
}

// WithLogger sets the logger of the Store's own findings (default
// slog.Default()): a rule state that was not valid and was repaired, a
// Redis that may evict the Store's keys. WithLogger(nil) turns them off.
func WithLogger(logger *slog.Logger) Option {
	return func(c *config) { c.logger = logger }
}

// ErrUnavailable is wrapped by the errors of calls that Redis did not
// answer: no answer within the timeout, a connection refused or broken, an
// open circuit breaker, a caller that gave up first. A Limiter applies its
// failure policy to them. Such errors also have an ErrorKind() string
// method for metrics: "timeout" (no answer within the timeout), "connect"
// (no connection within its budget), "circuit_open", "unavailable",
// "canceled" and "deadline" (the caller's context ended), "queue_full",
// "moved" (a cluster slot moved), "period". Mistakes that waiting will not mend (credentials,
// permissions, a database that does not exist, a key of another type)
// wrap storekit.ErrMisconfigured instead.
var ErrUnavailable = errors.New("redisstore: redis unavailable")

// A Store is a tollgate.Store that keeps every tenant's rule states in
// Redis, so that any number of API replicas share them. It works with a
// single server or Sentinel (*redis.Client), Redis Cluster
// (*redis.ClusterClient) and *redis.Ring. It is safe for concurrent use and
// needs no Close: its goroutines exit when it is idle, and closing the
// client is the caller's business. The zero Store is not usable; call New.
type Store struct {
	client   redis.UniversalClient
	prefix   string
	timeout  time.Duration
	failures int
	backoff  time.Duration
	logger   *slog.Logger
	clock    func() time.Time
	wall     func() time.Time
	script   script

	// offset is Redis's clock minus the process's, in microseconds, as
	// the latest reply showed it: quota periods are looked up at the
	// process's time plus offset.
	offset atomic.Int64

	single    *endpoint // for a *redis.Client
	endpoints sync.Map  // for a cluster or a ring: *redis.Client -> *endpoint
}

var (
	_ tollgate.Store    = (*Store)(nil)
	_ storekit.Reporter = (*Store)(nil)
)

// New returns a Store that keeps its state in Redis through client, which
// must be a *redis.Client (a single server or a Sentinel failover client),
// a *redis.ClusterClient or a *redis.Ring. New does not contact Redis: a
// Limiter's New asks the Store to check itself, which does.
//
// The Store adds a dial hook to the client (to each node's, on a cluster or
// ring): a read that meets its deadline takes a reply that has already
// arrived rather than fail, for the client's other commands too. Make one
// Store per client.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	c := config{prefix: DefaultPrefix, timeout: DefaultTimeout, failures: defaultBreakerFailures,
		backoff: defaultBreakerBackoff, logger: slog.Default()}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: redisstore: New: "+format, append([]any{storekit.ErrMisconfigured}, args...)...)
	}
	if err := checkPrefix(c.prefix); err != nil {
		return nil, fail("%v", err)
	}
	if c.timeout <= 0 {
		return nil, fail("WithTimeout must be > 0, got %v", c.timeout)
	}
	if c.failures > 0 && c.backoff <= 0 {
		return nil, fail("WithCircuitBreaker: backoff must be > 0, got %v", c.backoff)
	}
	s := &Store{client: client, prefix: c.prefix, timeout: c.timeout, failures: c.failures,
		backoff: c.backoff, logger: c.logger, clock: c.clock, wall: c.wall, script: newScript(c.script)}
	if s.wall == nil {
		s.wall = time.Now
	}
	switch cl := client.(type) {
	case *redis.Client:
		if cl == nil {
			return nil, fail("the client is nil")
		}
		s.single = s.newEndpoint(cl, opsPerScript)
	case *redis.ClusterClient, *redis.Ring:
		if isNil(cl) {
			return nil, fail("the client is nil")
		}
	case nil:
		return nil, fail("the client is nil")
	default:
		return nil, fail("a %T is not supported: use a *redis.Client, *redis.ClusterClient or *redis.Ring", client)
	}
	return s, nil
}

func isNil(c redis.UniversalClient) bool {
	switch cl := c.(type) {
	case *redis.ClusterClient:
		return cl == nil
	case *redis.Ring:
		return cl == nil
	}
	return false
}

// Key returns the Redis key of the hash that holds tenant's rule states,
// one field per rule (named as the rule) and "~expires", so that an
// operator can look at them (HGETALL) or delete them. The leases of the
// requests in flight under an in-flight policy (tollgate.Policy.InFlight)
// live in a sorted set beside it, under Key(tenant) + ":f:" + the rule's
// name ("inflight", "b:<budget>:inflight"), each scored by when it
// expires in microseconds since 1970 (ZRANGE key 0 -1 WITHSCORES). Every
// key a Store writes is one of these, or the overrides and change log
// under the prefix and "{#admin}:".
func (s *Store) Key(tenant string) string { return redisKey(s.prefix, tenant) }

// Take takes cost tokens from the token bucket of key under limit, as a Do
// of a Take with the one rule storekit.BucketRule(limit) would: its state
// is the tenant key's main bucket.
func (s *Store) Take(ctx context.Context, key string, limit tollgate.Limit, cost int64) (tollgate.Result, error) {
	if err := limit.Validate(); err != nil {
		return tollgate.Result{}, err
	}
	return storekit.TakeRule(ctx, s, key, storekit.BucketRule(limit.Rate, limit.Burst), cost)
}

// Do applies op to the rule states of op.Tenant in one atomic step of a
// Lua script, on Redis's clock (op.Now is ignored). It returns an error
// wrapping ErrUnavailable when Redis did not answer, storekit.ErrMisconfigured
// for a mistake that waiting will not mend, and storekit.ErrInvalid for
// rules beyond what the Store can compute exactly. If ctx ends first, Do
// returns at once; an Op already written to Redis may still be applied,
// and the slot of an in-flight cap that such a Take was granted is
// released as soon as Redis answers. A Release or a Cancel, which give
// back what a request held, go to Redis whatever ctx does: Do returns
// ctx's error at once all the same.
func (s *Store) Do(ctx context.Context, op *storekit.Op) (err error) {
	switch op.Kind {
	case storekit.Check:
		return s.check(ctx)
	case storekit.SaveOverride, storekit.LoadOverrides:
		return s.admin(ctx, op)
	case storekit.Reset:
		if op.Note != nil {
			defer func() {
				if err == nil {
					err = s.admin(ctx, op)
				}
			}()
		}
	case storekit.Take, storekit.Inspect, storekit.Cancel, storekit.Release, storekit.Renew:
	default:
		return fmt.Errorf("%w: redisstore: unknown Op kind %d", storekit.ErrInvalid, op.Kind)
	}
	if err := checkRules(op); err != nil {
		return err
	}
	key := redisKey(s.prefix, op.Tenant)
	e, err := s.endpoint(ctx, key)
	if err != nil {
		return err
	}
	return s.apply(ctx, op, key, e)
}

// endpoint returns the endpoint of the server that holds key.
func (s *Store) endpoint(ctx context.Context, key string) (*endpoint, error) {
	if s.single != nil {
		return s.single, nil
	}
	var node *redis.Client
	var err error
	switch cl := s.client.(type) {
	case *redis.ClusterClient:
		node, err = cl.MasterForKey(ctx, key)
	case *redis.Ring:
		node, err = cl.GetShardClientForKey(key)
	}
	if err != nil {
		return nil, unavailable("unavailable", fmt.Errorf("redisstore: finding the server of %s: %w", key, err))
	}
	return s.nodeEndpoint(node), nil
}

// nodeEndpoint returns the endpoint of a node of a cluster or ring.
func (s *Store) nodeEndpoint(node *redis.Client) *endpoint {
	if e, ok := s.endpoints.Load(node); ok {
		return e.(*endpoint)
	}
	perCmd := opsPerScript
	if _, cluster := s.client.(*redis.ClusterClient); cluster {
		perCmd = 1 // a script's keys must share a slot
	}
	e, _ := s.endpoints.LoadOrStore(node, s.newEndpoint(node, perCmd))
	return e.(*endpoint)
}

// Stats reports whether the circuit breaker is open (for any server of a
// cluster or ring) and how many times it has opened.
func (s *Store) Stats() storekit.Stats {
	var st storekit.Stats
	add := func(e *endpoint) {
		open, opens := e.breaker.stats()
		st.BreakerOpen = st.BreakerOpen || open
		st.BreakerOpens += opens
	}
	if s.single != nil {
		add(s.single)
	}
	s.endpoints.Range(func(_, e any) bool {
		add(e.(*endpoint))
		return true
	})
	return st
}

// Bounds of the rules the script computes exactly in its 53-bit numbers:
// the engine's own limits (a burst of 15 digits, a hundred years to refill
// or to wait) with the rounding of a bucket's interval.
const (
	expiresField = "~expires" // as apply.lua names it
	maxBurst     = 999_999_999_999_999
	maxTolerance = 4_200_000_000_000_000 // µs a bucket may run ahead of now
	maxDelay     = 100 * 365 * 24 * time.Hour
)

// checkRules reports rules the script could not compute exactly.
func checkRules(op *storekit.Op) error {
	if op.Cost > maxBurst {
		return fmt.Errorf("%w: redisstore: cost %d is above %d", storekit.ErrInvalid, op.Cost, int64(maxBurst))
	}
	for i := range op.Rules {
		r := &op.Rules[i]
		switch {
		case r.Burst < 1 || r.Burst > maxBurst:
			return fmt.Errorf("%w: redisstore: rule %q: burst %d is not 1 to %d", storekit.ErrInvalid, r.Name, r.Burst, int64(maxBurst))
		case r.Kind == storekit.Bucket && (r.Interval < 1 || r.Burst > maxTolerance/r.Interval):
			return fmt.Errorf("%w: redisstore: rule %q: a burst of %d at %d µs a token is beyond a hundred years",
				storekit.ErrInvalid, r.Name, r.Burst, r.Interval)
		case r.Kind == storekit.Quota && r.Period == nil:
			return fmt.Errorf("%w: redisstore: quota rule %q has no Period", storekit.ErrInvalid, r.Name)
		case r.Kind != storekit.Bucket && r.Kind != storekit.Quota && r.Kind != storekit.InFlight:
			return fmt.Errorf("%w: redisstore: rule %q has unknown kind %d", storekit.ErrInvalid, r.Name, r.Kind)
		case r.Kind == storekit.InFlight && (op.LeaseTTL < 0 || op.LeaseTTL > maxDelay):
			return fmt.Errorf("%w: redisstore: a lease of %v is not 0 to a hundred years", storekit.ErrInvalid, op.LeaseTTL)
		case r.Name == expiresField && r.Kind != storekit.InFlight:
			return fmt.Errorf("%w: redisstore: a rule may not be named %q, the field of the hash's expiry", storekit.ErrInvalid, r.Name)
		}
	}
	return nil
}

// DefaultPrefix starts every key a Store writes unless WithPrefix says
// otherwise.
const DefaultPrefix = "tollgate:"

// maxRawTenant is the longest tenant ID that is written into its Redis key
// as it is. Longer IDs, and IDs with bytes that are not printable ASCII, are
// hashed, so a Redis key is never longer than the prefix plus 46 bytes.
const maxRawTenant = 64

// hashedMark starts the hash tag of a hashed tenant ID. A raw ID never
// starts with it, so a raw ID and a hashed one never share a key.
const hashedMark = '#'

// redisKey maps a tenant ID of any bytes and length to the key of the hash
// that holds its rule states: prefix + "{" + tag + "}". The tag is the ID
// itself when it is short, printable ASCII without braces and does not
// start with '#', and otherwise '#' and the unpadded base64url SHA-256 of
// the ID. The store chooses the whole hash tag, so no tenant ID can pick
// its Cluster slot or reach another tenant's key, and the mapping is one to
// one (up to a SHA-256 collision).
func redisKey(prefix, tenant string) string {
	if rawTenantOK(tenant) {
		return prefix + "{" + tenant + "}"
	}
	sum := sha256.Sum256([]byte(tenant))
	var b [1 + 43]byte
	b[0] = hashedMark
	base64.RawURLEncoding.Encode(b[1:], sum[:])
	return prefix + "{" + string(b[:]) + "}"
}

// inFlightKey returns the key of the sorted set that holds the leases of
// the in-flight cap called rule of the tenant whose hash is key: the key,
// ":f:" and the rule's name. It shares the hash's tag, and so its Cluster
// slot; no hash's key, which ends at its tag, is ever one.
func inFlightKey(key, rule string) string { return key + ":f:" + rule }

func rawTenantOK(tenant string) bool {
	if len(tenant) == 0 || len(tenant) > maxRawTenant || tenant[0] == hashedMark {
		return false
	}
	for i := 0; i < len(tenant); i++ {
		c := tenant[i]
		if c <= ' ' || c > '~' || c == '{' || c == '}' {
			return false
		}
	}
	return true
}

func checkPrefix(prefix string) error {
	// A brace in the prefix would make the prefix, not the tenant, the
	// Cluster hash tag, and put every tenant in one slot.
	if strings.ContainsAny(prefix, "{}") {
		return fmt.Errorf("the key prefix %q must not contain '{' or '}'", prefix)
	}
	if len(prefix) > 256 {
		return fmt.Errorf("the key prefix is %d bytes long; at most 256 are allowed", len(prefix))
	}
	return nil
}
