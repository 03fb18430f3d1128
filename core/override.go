package tollgate

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/tollgate-go/tollgate/core/storekit"
)

// An Override gives one tenant other limits than its plan's, for a while:
// another plan, other figures for some of its policies, or both. Usage
// carries over: a tenant whose override is set, changed or cleared keeps
// what it has spent of every policy (no fresh burst, no fresh quota)
// unless it is also reset.
type Override struct {
	// Plan, if set, is the plan the tenant gets instead of its own; the
	// resolver must have it (a StaticResolver or SinglePlan knows its
	// plans).
	Plan string `json:"plan,omitempty"`

	// Limits, if set, replace the figures of policies of the plan: each
	// names a policy (Name; the plan's own bucket has the plan's name)
	// and gives its new Limit, a Quota whose Tokens replace the quota's
	// (its period stays), or its new InFlight. The plan is then shown as
	// "<plan>+override".
	Limits []Policy `json:"limits,omitempty"`

	// ExpiresAt, if not zero, ends the override: from then on the tenant
	// has its own limits again, on every replica.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// A Change is one operator's change to the limits of a tenant, as the
// Limiter applies it (see Limiter.Apply) and keeps it in its change log.
type Change struct {
	Tenant   string    `json:"tenant"`
	Action   string    `json:"action"`            // "override", "clear" or "reset"
	Override Override  `json:"override,omitzero"` // for "override"
	Reason   string    `json:"reason,omitempty"`
	By       string    `json:"by,omitempty"` // the operator's credential, by its label
	Time     time.Time `json:"time"`         // set by Apply
}

// The actions of a Change.
const (
	actionOverride = "override"
	actionClear    = "clear"
	actionReset    = "reset"
)

// overridesRefresh is how often a Limiter asks its store whether the
// overrides changed, while decisions come: another replica's change
// reaches it within that and a round trip.
const overridesRefresh = 50 * time.Millisecond

// overrideState is what a Limiter knows of the overrides in its store.
type overrideState struct {
	version int64
	tenants map[string]*activeOverride
	changes []Change // newest first
}

// An activeOverride is a tenant's override with the change that set it.
type activeOverride struct {
	change Change
	plan   *compiledPlan // the Override's Plan, compiled; nil for the tenant's own
}

// adminState holds the Limiter's view of its store's overrides and change log.
type adminState struct {
	state    atomic.Pointer[overrideState]
	loadedAt atomic.Int64 // Unix ns of the last load
	loading  atomic.Bool
	compiled planCache // plans with figures overridden
}

// Apply makes an operator's change to the limits of c.Tenant, on every
// replica that shares the store, and records it in the change log with its
// Reason and By: "override" sets c.Override (replacing any other), "clear"
// removes the tenant's override, "reset" makes every policy the tenant has
// or had full again (see Reset). Other replicas apply an override within
// about 50 ms while they decide; this one applies it from its next
// decision. Apply fails with ErrUnknownPlan for a plan the resolver does
// not have, and with ErrInvalidLimit for figures that are not valid.
func (l *Limiter) Apply(ctx context.Context, c Change) error {
	if l == nil {
		return errNilLimiter
	}
	if err := checkTenant(c.Tenant); err != nil {
		return err
	}
	c.Time = l.now()
	op := storekit.Op{Tenant: c.Tenant}
	switch c.Action {
	case actionOverride:
		if c.Override.Plan == "" && len(c.Override.Limits) == 0 {
			return fmt.Errorf("%w: an override needs a Plan or Limits", ErrInvalidLimit)
		}
		if !c.Override.ExpiresAt.IsZero() && !c.Override.ExpiresAt.After(c.Time) {
			return fmt.Errorf("%w: the override expired at %v, before it was set", ErrInvalidLimit, c.Override.ExpiresAt)
		}
		var base *compiledPlan
		if c.Override.Plan == "" {
			// Figures alone apply to the tenant's own plan: they must
			// name its policies.
			cp, err := l.resolve(ctx, c.Tenant)
			if err != nil {
				return fmt.Errorf("tollgate: Apply: resolving the plan of tenant %q: %w", c.Tenant, err)
			}
			base = cp
		}
		if _, err := l.overridden(&activeOverride{change: c}, base); err != nil {
			return err
		}
		value, err := encodeChange(c)
		if err != nil {
			return err
		}
		op.Kind, op.Value = storekit.SaveOverride, value
	case actionClear:
		op.Kind = storekit.SaveOverride
	case actionReset:
		d := Decision{Tenant: c.Tenant, Cost: 1, Time: c.Time}
		reset, _, err := l.tenantOp(ctx, storekit.Reset, &d)
		if err != nil {
			return err
		}
		defer ops.Put(reset)
		op = *reset
	default:
		return fmt.Errorf("tollgate: Apply: unknown action %q; want override, clear or reset", truncate(c.Action, 40))
	}
	note, err := encodeChange(c)
	if err != nil {
		return err
	}
	op.Note = note
	if err := l.store.Do(ctx, &op); err != nil {
		return fmt.Errorf("tollgate: Apply: %w", err)
	}
	if l.logger != nil {
		l.logger.LogAttrs(ctx, slog.LevelInfo, "rate limiter change",
			slog.String("tenant_id", c.Tenant), slog.String("action", c.Action),
			slog.String("plan", c.Override.Plan), slog.Int("limits", len(c.Override.Limits)),
			slog.Time("expires_at", c.Override.ExpiresAt),
			slog.String("reason", c.Reason), slog.String("by", c.By))
	}
	return l.loadOverrides(ctx)
}

// Overrides returns the changes that set the overrides in force now, by
// tenant. An override in the store that can not be read, or that is kept
// under a tenant ID no request can have, is left out, applies to no one,
// and is logged once.
func (l *Limiter) Overrides(ctx context.Context) ([]Change, error) {
	if l == nil {
		return nil, errNilLimiter
	}
	if err := l.loadOverrides(ctx); err != nil {
		return nil, err
	}
	now := l.now()
	var out []Change
	for _, ao := range l.admin.state.Load().tenants {
		if ao.live(now) {
			out = append(out, ao.change)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tenant < out[j].Tenant })
	return out, nil
}

// Changes returns the latest changes made through Apply on any replica that
// shares the store, newest first (at most 100).
func (l *Limiter) Changes(ctx context.Context) ([]Change, error) {
	if l == nil {
		return nil, errNilLimiter
	}
	if err := l.loadOverrides(ctx); err != nil {
		return nil, err
	}
	return slices.Clone(l.admin.state.Load().changes), nil
}

func (ao *activeOverride) live(now time.Time) bool {
	e := ao.change.Override.ExpiresAt
	return e.IsZero() || now.Before(e)
}

// loadOverrides reads the overrides from the store if they changed.
func (l *Limiter) loadOverrides(ctx context.Context) error {
	held := l.admin.state.Load()
	op := storekit.Op{Kind: storekit.LoadOverrides}
	if held != nil {
		op.Version = held.version
	}
	if err := l.store.Do(ctx, &op); err != nil {
		return fmt.Errorf("tollgate: loading the overrides: %w", err)
	}
	l.admin.loadedAt.Store(time.Now().UnixNano())
	if held != nil && op.Version == held.version {
		return nil
	}
	next := &overrideState{version: op.Version, tenants: make(map[string]*activeOverride, len(op.Overrides))}
	for tenant, value := range op.Overrides {
		c, err := decodeChange(value)
		if err == nil {
			// No request could have it, and Apply could not clear it.
			err = checkTenant(tenant)
		}
		if err != nil {
			l.mistake(ctx, "override:"+tenant, "rate limiter override unreadable: ignored",
				slog.String("tenant_id", truncate(tenant, maxTenantLength)), slog.String("error", err.Error()))
			continue
		}
		// The tenant it is kept under is the one it applies to, and the
		// one that Apply clears, whatever the value says.
		c.Tenant = tenant
		ao := &activeOverride{change: c}
		if c.Override.Plan != "" && l.compiledPlans != nil {
			ao.plan = l.compiledPlans.compiledPlan(c.Override.Plan)
		}
		next.tenants[tenant] = ao
	}
	for _, n := range op.Notes {
		if c, err := decodeChange(n); err == nil {
			next.changes = append(next.changes, c)
		}
	}
	l.admin.state.Store(next)
	return nil
}

// refreshOverrides reloads the overrides in the background, once at a
// time, so that a decision never waits for it; decisions call it when the
// overrides are older than overridesRefresh.
func (l *Limiter) refreshOverrides() {
	if !l.admin.loading.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer l.admin.loading.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := l.loadOverrides(ctx); err != nil {
			// Keep the overrides held; the next decision tries again.
			l.admin.loadedAt.Store(time.Now().UnixNano())
		}
	}()
}

// override returns the plan that tenant's override in force at now gives
// in place of cp, or cp.
func (l *Limiter) override(ctx context.Context, tenant string, cp *compiledPlan, now time.Time) *compiledPlan {
	st := l.admin.state.Load()
	if st == nil || len(st.tenants) == 0 {
		return cp
	}
	ao := st.tenants[tenant]
	if ao == nil || !ao.live(now) {
		return cp
	}
	out, err := l.overridden(ao, cp)
	if err != nil {
		l.mistake(ctx, "override:"+tenant, "rate limiter override can not apply: the tenant keeps its plan",
			slog.String("tenant_id", tenant), slog.String("error", err.Error()))
		return cp
	}
	return out
}

// overridden returns the plan ao gives a tenant whose own plan is base (the
// resolver's), or, with base nil, checks that ao can apply at all.
func (l *Limiter) overridden(ao *activeOverride, base *compiledPlan) (*compiledPlan, error) {
	o := &ao.change.Override
	plan := ao.plan
	if o.Plan != "" && plan == nil {
		if l.compiledPlans == nil {
			return nil, fmt.Errorf("%w: %q: the resolver can not tell its plans; give Limits instead", ErrUnknownPlan, truncate(o.Plan, 80))
		}
		if plan = l.compiledPlans.compiledPlan(o.Plan); plan == nil {
			return nil, fmt.Errorf("%w: %q", ErrUnknownPlan, truncate(o.Plan, 80))
		}
	}
	if plan == nil {
		if base == nil {
			// Limits alone are checked against the tenant's plan when
			// they apply; here only for being figures at all.
			return nil, checkLimits(o.Limits)
		}
		plan = base
	}
	if len(o.Limits) == 0 {
		return plan, nil
	}
	if err := checkLimits(o.Limits); err != nil {
		return nil, err
	}
	p := plan.plan
	p.Name = truncate(p.Name, maxNameLength-len("+override")-3) + "+override"
	p.Policies = slices.Clone(p.Policies)
	for _, lim := range o.Limits {
		if lim.Name == plan.plan.Name {
			p.Limit = lim.Limit
			continue
		}
		i := slices.Index(plan.policyNames, lim.Name)
		if i < 0 {
			return nil, fmt.Errorf("%w: the override names policy %q, which plan %q has not", ErrInvalidLimit, truncate(lim.Name, 80), plan.plan.Name)
		}
		pol := &p.Policies[i]
		pol.Name = lim.Name // a derived name would change with the plan's
		switch {
		case pol.InFlight > 0 && lim.InFlight > 0:
			pol.InFlight = lim.InFlight
		case !pol.Quota.IsZero() && lim.Quota.Tokens > 0:
			pol.Quota.Tokens = lim.Quota.Tokens
		case pol.Limit != Limit{} && lim.Limit != Limit{}:
			pol.Limit = lim.Limit
		default:
			return nil, fmt.Errorf("%w: the override gives policy %q figures of another kind", ErrInvalidLimit, lim.Name)
		}
	}
	return l.admin.compiled.get(&p)
}

// checkLimits reports whether limits are figures an override may give.
func checkLimits(limits []Policy) error {
	for i, lim := range limits {
		if !validName(lim.Name) {
			return fmt.Errorf("%w: Limits[%d]: Name must name the policy to change, got %q", ErrInvalidLimit, i, truncate(lim.Name, 80))
		}
		given := 0
		for _, has := range []bool{lim.Limit != Limit{}, lim.Quota.Tokens != 0, lim.InFlight != 0} {
			if has {
				given++
			}
		}
		if given != 1 {
			return fmt.Errorf("%w: Limits[%d]: give one of a Limit, a Quota's Tokens and InFlight", ErrInvalidLimit, i)
		}
		switch {
		case lim.InFlight != 0:
			if lim.InFlight < 1 || lim.InFlight > maxInFlight {
				return fmt.Errorf("%w: Limits[%d]: InFlight must be 1 to %d", ErrInvalidLimit, i, maxInFlight)
			}
		case lim.Limit != Limit{}:
			if err := lim.Limit.Validate(); err != nil {
				return fmt.Errorf("the override's Limits[%d]: %w", i, err)
			}
		case lim.Quota.Tokens < 1 || lim.Quota.Tokens > maxBurst:
			return fmt.Errorf("%w: Limits[%d]: Quota.Tokens must be 1 to %d", ErrInvalidLimit, i, int64(maxBurst))
		}
	}
	return nil
}

// A storedChange is a Change as stores keep it: JSON, with the tenant ID
// in base64, since JSON strings hold only valid UTF-8 and a tenant ID may
// be any bytes.
type storedChange struct {
	Tenant []byte `json:"tenant"`
	Change Change `json:"change"`
}

func encodeChange(c Change) ([]byte, error) {
	tenant := []byte(c.Tenant)
	c.Tenant = ""
	return json.Marshal(storedChange{Tenant: tenant, Change: c})
}

func decodeChange(b []byte) (Change, error) {
	var s storedChange
	if err := json.Unmarshal(b, &s); err != nil {
		return Change{}, err
	}
	s.Change.Tenant = string(s.Tenant)
	return s.Change, nil
}

// Plans returns the plans the Limiter's resolver can give, for an
// operator to choose from, or nil if it can not tell (a CachingResolver, a
// resolver of the application's own).
func (l *Limiter) Plans() []Plan {
	if l == nil || l.compiledPlans == nil {
		return nil
	}
	return slices.Clone(l.compiledPlans.knownPlans())
}
