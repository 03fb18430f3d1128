package adapterkit

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/internal/hooks"
)

// TenantHeader is the request header that middleware of every framework
// reads the tenant from when the application gives no tenant function.
const TenantHeader = "X-Tenant-ID"

// canonicalTenantHeader is TenantHeader in the canonical form of net/http,
// so that a header map finds it without canonicalising it anew on every
// request.
var canonicalTenantHeader = http.CanonicalHeaderKey(TenantHeader)

// DefaultMaxHeld is the number of requests of one tenant that the delay mode
// holds at once unless Spec.MaxHeld says otherwise.
const DefaultMaxHeld = 16

// A Spec is what every adapter's configuration means, defined once: each
// adapter translates its framework's idiom (gin options, an Echo or Fiber
// Config, gRPC interceptor options, net/http options) into a Spec. C is the
// framework's request context: *http.Request, *gin.Context, echo.Context,
// *fiber.Ctx and so on.
//
// Every function may be nil, which means its default; the order in which an
// adapter's options are given never matters.
type Spec[C any] struct {
	// Limiter decides on every request that Skip does not exempt. It is
	// required: Build reports a nil Limiter, and the adapters then answer
	// every request 500 rather than panic or let requests through
	// unlimited.
	Limiter *tollgate.Limiter

	// Tenant finds the tenant of a request; "" means the request has
	// none, which is answered 401 unless the adapter's missing-tenant
	// answer says otherwise. Default: the TenantHeader header. The tenant
	// should come from the authenticated principal.
	Tenant func(c C) string

	// Cost is the tokens each request takes; < 1 means 1.
	Cost int64

	// CostFunc, if set, gives the tokens each request takes instead of
	// Cost; a result < 1 counts as 1.
	CostFunc func(c C) int64

	// Skip, if set, exempts the requests for which it returns true: they
	// go on without a decision, without rate-limit headers, and take
	// nothing.
	Skip func(c C) bool

	// Route names the request's route in logs and metrics: the router's
	// pattern, never the raw path. Default: the route the adapter reads
	// from its framework (Call.Route). A Limiter without Observers has
	// only its log to read routes, and only of decisions that were not
	// simply allowed: Route is then called for those alone, after the
	// decision and before the log.
	Route func(c C) string

	// Budget, if set, makes every request also draw from the budget of
	// that name, with the figures its tenant's plan gives the budget (see
	// tollgate.Policy). Build asks the Limiter whether it can be (see
	// tollgate.Limiter.CheckBudget): a name that no plan of a resolver
	// that knows its plans has is a configuration error.
	Budget string

	// MaxDelay, if > 0, holds a request that the policies would allow
	// within MaxDelay, on its own goroutine, and then serves it, instead
	// of answering 429: a client slightly over its rate is slowed down
	// rather than bounced (nginx's limit_req delay). A request that would
	// wait longer, or past its context's deadline, gets 429 at once. The
	// headers describe the state after the wait. A request whose context
	// ends while held (its client went away) gives its tokens back. A
	// request refused only for want of a slot of an in-flight policy
	// waits for one, in order of arrival, within MaxDelay (Limiter.Wait),
	// and gets 429 having spent nothing if none comes free in time. Plans
	// in shadow mode never hold a request.
	MaxDelay time.Duration

	// MaxHeld bounds the requests of one tenant held at once under
	// MaxDelay (default DefaultMaxHeld); past it, a request is decided
	// without waiting. A request counts from before its decision, so
	// that the bound holds in any burst: one that is then served at
	// once may still count when others of the burst arrive.
	MaxHeld int

	// PartitionKeySecret, if set, makes every RateLimit item carry the
	// draft's partition key (pk): a keyed hash of the request's tenant,
	// never the tenant ID itself, so that a client can tell the
	// partitions apart without the header revealing whom they belong to.
	// The key is the first 16 bytes of HMAC-SHA256(secret, tenant), as
	// an RFC 9651 byte sequence. The secret must be at least
	// MinPartitionKeySecret bytes; keep it as secret as any key: with it,
	// anyone could tell which tenant a key stands for.
	PartitionKeySecret []byte
}

// MinPartitionKeySecret is the shortest Spec.PartitionKeySecret, in bytes.
const MinPartitionKeySecret = 16

// A Framework is what an adapter tells Build about its framework.
type Framework struct {
	// CopyTenant is set for frameworks that reuse the memory behind the
	// strings a request gives (fasthttp's): Build then copies what a
	// Spec's Tenant returns, which the Limiter may keep.
	CopyTenant bool
}

// A Handler decides on the requests of one framework as a Spec says. Build
// one with Build; it is safe for concurrent use.
type Handler[C any] struct {
	limiter  *tollgate.Limiter
	tenant   func(C) string
	cost     int64
	costFunc func(C) int64
	skip     func(C) bool
	route    func(C) string
	budget   string
	maxDelay time.Duration
	held     *heldCounts // when maxDelay > 0
	pkSecret []byte      // Spec.PartitionKeySecret, copied

	// routeLater defers route to decisions that are not simply allowed,
	// when nothing else reads the route (see hooks.RouteAlways).
	routeLater bool
}

// ErrNoLimiter is the configuration error of a Spec without a Limiter.
var ErrNoLimiter = errors.New("tollgate middleware: the Limiter is nil")

// Build checks s and returns the Handler that applies it to requests of a
// framework as fw describes it.
func Build[C any](s Spec[C], fw Framework) (*Handler[C], error) {
	switch {
	case s.Limiter == nil:
		return nil, ErrNoLimiter
	case s.MaxDelay < 0 || s.MaxHeld < 0:
		return nil, fmt.Errorf("tollgate middleware: MaxDelay and MaxHeld must be >= 0, got %v and %d", s.MaxDelay, s.MaxHeld)
	case s.PartitionKeySecret != nil && len(s.PartitionKeySecret) < MinPartitionKeySecret:
		return nil, fmt.Errorf("tollgate middleware: PartitionKeySecret must be at least %d bytes, got %d", MinPartitionKeySecret, len(s.PartitionKeySecret))
	}
	if s.Budget != "" {
		if err := s.Limiter.CheckBudget(s.Budget); err != nil {
			return nil, fmt.Errorf("tollgate middleware: Budget: %w", err)
		}
	}
	h := &Handler[C]{
		limiter:  s.Limiter,
		tenant:   s.Tenant,
		cost:     max(s.Cost, 1),
		costFunc: s.CostFunc,
		skip:     s.Skip,
		route:    s.Route,
		budget:   s.Budget,
		maxDelay: s.MaxDelay,
		pkSecret: bytes.Clone(s.PartitionKeySecret),
	}
	h.routeLater = h.route != nil && !hooks.RouteAlways(h.limiter)
	if h.tenant != nil && fw.CopyTenant {
		tenant := h.tenant
		h.tenant = func(c C) string { return strings.Clone(tenant(c)) }
	}
	if s.MaxDelay > 0 {
		maxHeld := s.MaxHeld
		if maxHeld == 0 {
			maxHeld = DefaultMaxHeld
		}
		h.held = &heldCounts{max: maxHeld, counts: map[string]int{}}
	}
	return h, nil
}

// partitionKey returns the base64 of the partition key of tenant (see
// Spec.PartitionKeySecret), or nil without a secret.
func (h *Handler[C]) partitionKey(tenant string) []byte {
	if h.pkSecret == nil {
		return nil
	}
	m := hmac.New(sha256.New, h.pkSecret)
	m.Write([]byte(tenant))
	var sum [sha256.Size]byte
	return base64.StdEncoding.AppendEncode(nil, m.Sum(sum[:0])[:16])
}

// heldCounts counts the requests of each tenant that the delay mode holds.
type heldCounts struct {
	max    int
	mu     sync.Mutex
	counts map[string]int // tenants with requests held now
}

// acquire reports whether another request of tenant may be held, and
// counts it if so.
func (hc *heldCounts) acquire(tenant string) bool {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if hc.counts[tenant] >= hc.max {
		return false
	}
	hc.counts[tenant]++
	return true
}

func (hc *heldCounts) release(tenant string) {
	hc.mu.Lock()
	if hc.counts[tenant]--; hc.counts[tenant] <= 0 {
		delete(hc.counts, tenant)
	}
	hc.mu.Unlock()
}

// LogMisconfiguration logs a middleware configuration error at level Error
// on slog's default logger, as every adapter does, once, when it is built
// wrong; its middleware then answers every request 500.
func LogMisconfiguration(err error) {
	slog.Default().LogAttrs(context.Background(), slog.LevelError,
		"rate limiter misconfigured: every request will be refused", slog.String("error", err.Error()))
}

// TenantString returns v as a tenant ID: v itself if it is a string, its
// String method's result if it is a fmt.Stringer, and "" otherwise. The
// adapters' TenantFromContext read framework context values with it.
func TenantString(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case fmt.Stringer:
		return t.String()
	}
	return ""
}
