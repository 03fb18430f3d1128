package tollgate

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/tollgate-go/tollgate/core/storekit"
)

// A compiledPlan is a Plan checked once and turned into the rules a Store
// applies: one rule set for requests without a budget, one per budget, and
// one with every rule, for Inspect and Reset.
type compiledPlan struct {
	plan        Plan
	policyNames []string // of plan.Policies, as compile filled them in
	base        *ruleSet
	byBudget    map[string]*ruleSet
	all         *ruleSet
}

// A ruleSet is the policies that apply to one kind of request, in order
// (the plan's Limit first), and the store's rules for them.
type ruleSet struct {
	plan     string
	policies []Policy // with their names filled in
	rules    []storekit.Rule
	maxCost  int64           // the smallest capacity of its policies, slots apart
	inFlight []storekit.Rule // its InFlight rules, which hold a slot per request

	// memo holds what the HTTP layer derives from the policies alone
	// (header values), so that it is computed once per plan.
	memo atomic.Value

	// counted is where the last Limiter to use the rule set counts its
	// slots held without a lease (see Limiter.countHeld).
	counted atomic.Pointer[countedBy]
}

// ruleSet returns the rules that a request drawing from budget is subject
// to. A budget the plan has no policy for adds nothing.
func (c *compiledPlan) ruleSet(budget string) *ruleSet {
	if budget != "" {
		if rs, ok := c.byBudget[budget]; ok {
			return rs
		}
	}
	return c.base
}

// checkCost reports whether a request of cost can ever pass every rule.
func (rs *ruleSet) checkCost(cost int64) error {
	if cost <= rs.maxCost {
		return nil
	}
	for i := range rs.rules {
		if rs.rules[i].Kind == storekit.InFlight {
			continue
		}
		if err := checkCost(cost, rs.rules[i].Burst); err != nil {
			return fmt.Errorf("plan %q: policy %q: %w", rs.plan, rs.policies[i].Name, err)
		}
	}
	return nil
}

func (rs *ruleSet) add(p Policy, r storekit.Rule) {
	rs.policies = append(rs.policies, p)
	rs.rules = append(rs.rules, r)
	if r.Kind == storekit.InFlight {
		// A request holds one slot, whatever its cost.
		rs.inFlight = append(rs.inFlight, r)
		return
	}
	if len(rs.rules) == 1 || r.Burst < rs.maxCost {
		rs.maxCost = r.Burst
	}
}

// compile checks p and builds its rule sets. Every error names the field at
// fault.
func compile(p Plan) (*compiledPlan, error) {
	if !validName(p.Name) {
		return nil, invalidName("Plan.Name", p.Name)
	}
	if err := p.Limit.Validate(); err != nil {
		return nil, fmt.Errorf("plan %q: Limit: %w", p.Name, err)
	}
	if len(p.Policies) > maxPolicies {
		return nil, fmt.Errorf("%w: plan %q has %d policies; at most %d are allowed", ErrInvalidLimit, p.Name, len(p.Policies), maxPolicies)
	}
	p.Policies = append([]Policy(nil), p.Policies...) // the caller's slice may change later
	c := &compiledPlan{plan: p, byBudget: map[string]*ruleSet{}}
	base, all := &ruleSet{plan: p.Name}, &ruleSet{plan: p.Name}
	main := Policy{Name: p.Name, Limit: p.Limit}
	base.add(main, p.Limit.rule(""))
	all.add(main, p.Limit.rule(""))
	names := map[string]bool{p.Name: true}
	states := map[string]string{"": p.Name}
	type budgeted struct {
		p Policy
		r storekit.Rule
	}
	var budgets []budgeted
	for i, pol := range p.Policies {
		rule, named, err := compilePolicy(p.Name, pol)
		field := fmt.Sprintf("plan %q: Policies[%d]", p.Name, i)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		if names[named.Name] {
			return nil, fmt.Errorf("%w: %s: Name %q is used twice in the plan", ErrInvalidLimit, field, named.Name)
		}
		names[named.Name] = true
		c.policyNames = append(c.policyNames, named.Name)
		if other, dup := states[rule.Name]; dup {
			return nil, fmt.Errorf("%w: %s: policy %q would share its state with %q (one bucket and one quota of each period for the plan and for each budget)",
				ErrInvalidLimit, field, named.Name, other)
		}
		states[rule.Name] = named.Name
		if pol.Budget == "" {
			base.add(named, rule)
		} else {
			budgets = append(budgets, budgeted{named, rule})
		}
	}
	// A budget's requests draw from the plan-wide policies too, first;
	// every rule set starts with base, and all has every rule.
	for i := 1; i < len(base.rules); i++ {
		all.add(base.policies[i], base.rules[i])
	}
	for _, b := range budgets {
		rs := c.byBudget[b.p.Budget]
		if rs == nil {
			rs = &ruleSet{plan: p.Name}
			for i := range base.rules {
				rs.add(base.policies[i], base.rules[i])
			}
			c.byBudget[b.p.Budget] = rs
		}
		rs.add(b.p, b.r)
		all.add(b.p, b.r)
	}
	c.base, c.all = base, all
	return c, nil
}

// compilePolicy checks one policy of the plan called plan, and returns its
// rule and the policy with its name filled in.
func compilePolicy(plan string, pol Policy) (storekit.Rule, Policy, error) {
	hasLimit, hasQuota, hasInFlight := pol.Limit != (Limit{}), !pol.Quota.IsZero(), pol.InFlight != 0
	set := 0
	for _, has := range []bool{hasLimit, hasQuota, hasInFlight} {
		if has {
			set++
		}
	}
	switch {
	case set != 1:
		return storekit.Rule{}, pol, fmt.Errorf("%w: exactly one of Limit, Quota and InFlight must be set", ErrInvalidLimit)
	case pol.Budget != "" && !validName(pol.Budget):
		return storekit.Rule{}, pol, invalidName("Budget", pol.Budget)
	case pol.Name != "" && !validName(pol.Name):
		return storekit.Rule{}, pol, invalidName("Name", pol.Name)
	}
	var rule storekit.Rule
	if hasInFlight {
		if pol.InFlight < 1 || pol.InFlight > maxInFlight {
			return rule, pol, fmt.Errorf("%w: InFlight must be 1 to %d, got %d", ErrInvalidLimit, maxInFlight, pol.InFlight)
		}
		state := "inflight"
		if pol.Budget != "" {
			state = "b:" + pol.Budget + ":inflight"
		}
		rule = storekit.Rule{Kind: storekit.InFlight, Name: state, Burst: pol.InFlight}
		if pol.Name == "" {
			pol.Name = joinName(plan, pol.Budget, "inflight")
		}
	} else if hasQuota {
		if err := pol.Quota.Validate(); err != nil {
			return rule, pol, err
		}
		state := "day"
		if pol.Quota.Period == Monthly {
			state = "month"
		}
		if pol.Budget != "" {
			state = "b:" + pol.Budget + ":" + state
		}
		rule = pol.Quota.rule(state)
		if pol.Name == "" {
			pol.Name = joinName(plan, pol.Budget, pol.Quota.Period.String())
		}
	} else {
		if err := pol.Limit.Validate(); err != nil {
			return rule, pol, fmt.Errorf("Limit: %w", err)
		}
		switch {
		case pol.Budget != "":
			rule = pol.Limit.rule("b:" + pol.Budget)
			if pol.Name == "" {
				pol.Name = joinName(plan, pol.Budget, "")
			}
		case pol.Name == "":
			return rule, pol, fmt.Errorf("%w: Name must be set on a token bucket without a Budget", ErrInvalidLimit)
		default:
			rule = pol.Limit.rule("r:" + pol.Name)
		}
	}
	if !validName(pol.Name) {
		return rule, pol, fmt.Errorf("%w: the derived name %q is too long; set Name", ErrInvalidLimit, truncate(pol.Name, 80))
	}
	return rule, pol, nil
}

func joinName(parts ...string) string {
	s := ""
	for _, p := range parts {
		if p == "" {
			continue
		}
		if s != "" {
			s += "-"
		}
		s += p
	}
	return s
}

// A planCache keeps the compiled plans of a resolver that returns Plans, by
// name, with up to planVariants variants of each name (tenants whose limits
// are their own under a shared plan name); it compares plans by value, so a
// resolver that builds a fresh Plan on every call still hits. Reads take no
// lock; the rare writes copy the map.
type planCache struct {
	mu    sync.Mutex
	plans atomic.Pointer[map[string][]*compiledPlan]
}

// Bounds of a planCache: past them, a plan is compiled on each request,
// which is correct, only slower.
const (
	maxCachedPlans = 256
	planVariants   = 8
)

func (c *planCache) get(p *Plan) (*compiledPlan, error) {
	if m := c.plans.Load(); m != nil {
		for _, cp := range (*m)[p.Name] {
			if cp.plan.equal(p) {
				return cp, nil
			}
		}
	}
	cp, err := compile(*p)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var old map[string][]*compiledPlan
	if m := c.plans.Load(); m != nil {
		old = *m
	}
	variants := old[p.Name]
	if variants == nil && len(old) >= maxCachedPlans {
		return cp, nil
	}
	next := make(map[string][]*compiledPlan, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	// The newest variant first; the oldest goes past the bound.
	next[p.Name] = append([]*compiledPlan{cp}, variants[:min(len(variants), planVariants-1)]...)
	c.plans.Store(&next)
	return cp, nil
}

// len returns the number of compiled plans cached.
func (c *planCache) len() int {
	n := 0
	if m := c.plans.Load(); m != nil {
		for _, v := range *m {
			n += len(v)
		}
	}
	return n
}
