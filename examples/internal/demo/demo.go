// Package demo is the set-up that the six example apps share and that has
// nothing to do with their web framework: the environment they read, the
// JSON logger, the demo tenants and their plans, the choice between the
// in-process and the Redis store, and the listening socket.
//
// Each function says what a real application would do instead.
package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/redisstore"
	tollgateprom "github.com/tollgate-go/tollgate/prometheus"
)

// DefaultAddr is where the apps listen when ADDR is not set.
const DefaultAddr = ":8080"

// TenantHeader carries the tenant of a request in the demo. It stands in
// for the authenticated principal: a real API takes the tenant from a
// verified token or session, never from a header the client chooses.
const TenantHeader = "X-Tenant-ID"

// ListeningMsg is the message of the log line that an app writes once it
// accepts connections; its "addr" attribute is the address it listens on.
// The demos and the end-to-end tests wait for it.
const ListeningMsg = "listening"

// Config is what the apps read from their environment.
type Config struct {
	Addr     string // ADDR: host:port to listen on; default DefaultAddr
	RedisURL string // REDIS_URL, e.g. redis://127.0.0.1:6379/0; empty for the in-process store

	// AdminToken (ADMIN_TOKEN) turns on the upgrade-candidates page at
	// AdminPath, for requests with "Authorization: Bearer <token>".
	// Empty, there is no page.
	AdminToken string

	// Shadow (SHADOW=1) puts every plan in shadow mode: decisions are
	// made, logged and recorded, but no request is denied.
	Shadow bool
}

// ConfigFromEnv reads ADDR, REDIS_URL, ADMIN_TOKEN and SHADOW.
func ConfigFromEnv() Config {
	c := Config{Addr: os.Getenv("ADDR"), RedisURL: os.Getenv("REDIS_URL"),
		AdminToken: os.Getenv("ADMIN_TOKEN"), Shadow: os.Getenv("SHADOW") == "1"}
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	return c
}

// NewLogger returns the apps' logger: JSON lines on stdout, which is what
// log collectors expect and what makes the throttle lines queryable by
// tenant_id and plan.
func NewLogger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(os.Stdout, nil))
}

// Tenants returns the demo's plan assignments (tenant -> plan name). Every
// other tenant is on the free plan.
func Tenants() map[string]string {
	return map[string]string{
		"acme":     "enterprise",
		"globex":   "growth",
		"initech":  "startup",
		"umbrella": "trial",
	}
}

// DefaultPlan is the plan of every tenant that Tenants does not name.
const DefaultPlan = "free"

// ReportsBudget is the budget that POST /api/reports draws from, beside
// the tenant's plan, and ReportCost what one report takes from both.
const (
	ReportsBudget = "reports"
	ReportCost    = 10
)

// reports is the reports budget of every plan: 50 tokens an hour, which is
// five reports, refilled one token every 72 seconds.
var reports = tollgate.Policy{Budget: ReportsBudget, Limit: tollgate.Limit{Rate: 50.0 / 3600, Burst: 50}}

// PlanList returns the demo's plans: tollgate's default plans and a trial
// plan (a burst of 10 at 5 a second, and 30 requests per UTC day), each
// with the reports budget.
func PlanList() []tollgate.Plan {
	plans := append(tollgate.DefaultPlans(), tollgate.Plan{
		Name:     "trial",
		Limit:    tollgate.Limit{Rate: 5, Burst: 10},
		Policies: []tollgate.Policy{{Quota: tollgate.PerDay(30)}},
	})
	for i := range plans {
		plans[i].Policies = append(plans[i].Policies, reports)
	}
	return plans
}

// Plans returns the PlanResolver of the demo: PlanList, assigned as Tenants
// says.
//
// A real application keeps each tenant's plan in its database and resolves
// it through a cache, so that the database sees one query per tenant per
// minute rather than one per request:
//
//	plans, err := tollgate.NewCachingResolver(tollgate.PlanResolverFunc(
//		func(ctx context.Context, tenant string) (tollgate.Plan, error) {
//			return db.PlanOfTenant(ctx, tenant) // your query
//		}), time.Minute)
//
// and calls plans.Invalidate(tenant) when a tenant changes plan.
func Plans() (*tollgate.StaticResolver, error) {
	return tollgate.NewStaticResolver(PlanList(), DefaultPlan, Tenants())
}

// PlanOf returns the plan that Plans gives tenant.
func PlanOf(tenant string) (tollgate.Plan, error) {
	plans, err := Plans()
	if err != nil {
		return tollgate.Plan{}, err
	}
	return plans.ResolvePlan(context.Background(), tenant)
}

// NewLimiter returns the apps' Limiter, the handler of their GET /metrics,
// the handler of the upgrade-candidates page (nil unless cfg.AdminToken is
// set), and a function that releases what they hold. Buckets live in memory
// unless cfg.RedisURL is set; then they live in Redis, shared by every
// replica that uses the same Redis, and so do the page's candidates.
//
// /metrics serves the Limiter's decisions (tollgateprom: by plan, policy,
// route and outcome, never by tenant), the store's figures, and the Go
// runtime's and the process's metrics, in the Prometheus text format. The
// demo serves it on the API's port to anyone; a real deployment serves it
// on an internal port, or behind the scraper's credentials.
//
// A Redis that does not answer does not stop the app: it starts, logs a
// warning, and serves every request without limits (tollgate.FailOpen) and
// without rate-limit headers, until Redis answers again. Throttled requests
// are logged on logger as JSON lines.
func NewLimiter(ctx context.Context, cfg Config, logger *slog.Logger) (*tollgate.Limiter, http.Handler, http.Handler, func(), error) {
	store, client, closeStore, err := newStore(ctx, cfg.RedisURL, logger)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	plans, err := tollgate.NewStaticResolver(PlanList(), DefaultPlan, Tenants())
	if err != nil {
		closeStore()
		return nil, nil, nil, nil, err
	}
	metrics, err := tollgateprom.New(tollgateprom.WithStore(store))
	if err != nil {
		closeStore()
		return nil, nil, nil, nil, err
	}
	opts := []tollgate.Option{
		// Fail-open is the default; it is spelled out because it is a
		// choice: an API that answers without limits for a minute beats
		// one that answers nothing. tollgate.FailClosed refuses instead.
		tollgate.WithFailurePolicy(tollgate.FailOpen),
		tollgate.WithLogger(logger),
		tollgate.WithObserver(metrics),
	}
	if cfg.Shadow {
		logger.Warn("shadow mode: every decision is made, logged and recorded, but no request is denied (SHADOW=1)")
		opts = append(opts, tollgate.WithShadow())
	}
	tracker, admin, err := newInsights(cfg, client, logger)
	if err != nil {
		closeStore()
		return nil, nil, nil, nil, err
	}
	release := closeStore
	if tracker != nil {
		opts = append(opts, tollgate.WithObserver(tracker))
		release = func() {
			_ = tracker.Close() // publishes its last counts while Redis is still open
			closeStore()
		}
	}
	l, err := tollgate.New(store, plans, opts...)
	if err != nil {
		release()
		return nil, nil, nil, nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return l, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), admin, release, nil
}

// newStore returns the store of the apps' limits, and its Redis client (nil
// for the memory store). Both stores are tollgate.MultiStores, which the
// trial's daily quota and the reports budget need.
func newStore(ctx context.Context, redisURL string, logger *slog.Logger) (tollgate.MultiStore, redis.UniversalClient, func(), error) {
	if redisURL == "" {
		logger.Info("rate limits kept in memory; each process counts on its own (set REDIS_URL to share them)",
			slog.String("store", "memory"))
		return memory.New(), nil, func() {}, nil
	}
	opts, err := ParseRedisURL(redisURL)
	if err != nil {
		return nil, nil, nil, err
	}
	// go-redis writes its own messages (failed dials, mostly) as plain
	// lines on stderr; send them to the JSON log with everything else.
	redis.SetLogger(redisLogger{logger})
	client := redis.NewClient(opts)
	// With several replicas, a real deployment would also keep limiting
	// while Redis is down, each replica with its share of the limit, by
	// passing this option to tollgate.New:
	//
	//	tollgate.WithFallbackStore(redisstore.DividedStore{Store: memory.New(), Replicas: n})
	//
	// The demo shows plain fail-open, which needs no replica count.
	store, err := redisstore.New(client)
	if err != nil {
		client.Close()
		return nil, nil, nil, err
	}
	where := []any{slog.String("store", "redis"), slog.String("redis", opts.Addr), slog.Int("db", opts.DB)}
	// The ping is only for the log: the store copes with a Redis that
	// comes and goes, so the app starts either way.
	pingCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := client.Ping(pingCtx).Err(); err != nil {
		logger.Warn("redis does not answer; serving without rate limits until it does",
			append(where, slog.String("error", err.Error()))...)
	} else {
		logger.Info("rate limits shared through redis", where...)
	}
	return store, client, func() { client.Close() }, nil
}

// ParseRedisURL reads a redis:// or rediss:// URL such as REDIS_URL. Its
// errors name the part of the URL at fault and never its user or password:
// they reach logs, and a password in a log is a leaked password. (The
// parser's own errors quote the whole URL.)
func ParseRedisURL(raw string) (*redis.Options, error) {
	redacted := redactUserinfo(raw)
	if _, err := redis.ParseURL(redacted); err != nil {
		// The redacted URL holds no secret, but say only what the
		// parser found wrong, without quoting the URL.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("REDIS_URL is not a valid redis:// URL: %v", err)
	}
	opts, err := redis.ParseURL(raw)
	if err != nil {
		// Only the user or password can be at fault now.
		return nil, errors.New("REDIS_URL: the user or password (before the @) is not valid in a URL: percent-encode reserved characters")
	}
	return opts, nil
}

// redactUserinfo returns raw with its user and password part ("user:pw" of
// "redis://user:pw@host/0") replaced by a placeholder of the same shape.
func redactUserinfo(raw string) string {
	prefix, rest := "", raw
	if i := strings.Index(raw, "://"); i >= 0 {
		prefix, rest = raw[:i+3], raw[i+3:]
	}
	authority := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority = rest[:i]
	}
	at := strings.LastIndexByte(authority, '@')
	if at < 0 {
		return raw
	}
	placeholder := "user"
	if strings.Contains(authority[:at], ":") {
		placeholder = "user:password"
	}
	return prefix + placeholder + rest[at:]
}

// redisLogger adapts a slog.Logger to go-redis's logging interface.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.WarnContext(ctx, "redis client", slog.String("detail", fmt.Sprintf(format, v...)))
}

// Listen opens the listening socket on addr and logs ListeningMsg with the
// address it got, so that ADDR=127.0.0.1:0 picks a free port and tells.
func Listen(addr string, logger *slog.Logger) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	logger.Info(ListeningMsg, slog.String("addr", ln.Addr().String()), slog.Int("pid", os.Getpid()))
	return ln, nil
}

// Budget returns the tokens that plan p's token bucket lets one tenant
// spend over elapsed, starting from a full bucket: the burst plus what
// refills meanwhile.
func Budget(p tollgate.Plan, elapsed time.Duration) float64 {
	return float64(p.Limit.Burst) + p.Limit.Rate*elapsed.Seconds()
}
