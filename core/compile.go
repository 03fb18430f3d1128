package tollgate

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// A compiledPlan is a Plan checked once and turned into the Rules a Store
// applies: one rule set for requests without a budget, one per budget, and
// one with every rule, for Inspect and Reset.
type compiledPlan struct {
	plan     Plan
	base     *ruleSet
	byBudget map[string]*ruleSet
	all      *ruleSet
}

// A ruleSet is the policies that apply to one kind of request, in order
// (the plan's Limit first), and the Store's rules for them.
type ruleSet struct {
	policies []Policy // with their names filled in
	rules    []Rule
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
	for i := range rs.rules {
		r := &rs.rules[i]
		capacity := r.Limit.Burst
		if r.IsQuota() {
			capacity = r.Quota.Tokens
		}
		if cost > capacity {
			// The slow path: only a misconfigured request gets here.
			return fmt.Errorf("policy %q: %w", rs.policies[i].Name, r.Validate(cost))
		}
	}
	return nil
}

// compile checks p and builds its rule sets. Every error names the field at
// fault.
func compile(p Plan) (*compiledPlan, error) {
	if !ValidName(p.Name) {
		return nil, invalidName("Plan.Name", p.Name)
	}
	if err := p.Limit.Validate(); err != nil {
		return nil, fmt.Errorf("plan %q: %w", p.Name, err)
	}
	if len(p.Policies) > maxPolicies {
		return nil, fmt.Errorf("%w: plan %q has %d policies; at most %d are allowed", ErrInvalidLimit, p.Name, len(p.Policies), maxPolicies)
	}
	c := &compiledPlan{plan: p, byBudget: map[string]*ruleSet{}}
	main := Policy{Name: p.Name, Limit: p.Limit}
	base := &ruleSet{policies: []Policy{main}, rules: []Rule{{Limit: p.Limit}}}
	all := &ruleSet{policies: []Policy{main}, rules: []Rule{{Limit: p.Limit}}}
	names := map[string]bool{p.Name: true}
	subs := map[string]string{"": p.Name}
	var budgetPolicies []Policy
	var budgetRules []Rule
	for i, pol := range p.Policies {
		field := fmt.Sprintf("plan %q: Policies[%d]", p.Name, i)
		rule, named, err := compilePolicy(p.Name, pol)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		if names[named.Name] {
			return nil, fmt.Errorf("%w: %s: Name %q is used twice in the plan", ErrInvalidLimit, field, named.Name)
		}
		names[named.Name] = true
		if other, dup := subs[rule.Sub]; dup {
			return nil, fmt.Errorf("%w: %s: policy %q would share its state with %q (one bucket and one quota per period for the plan and for each budget)",
				ErrInvalidLimit, field, named.Name, other)
		}
		subs[rule.Sub] = named.Name
		if pol.Budget == "" {
			base.policies = append(base.policies, named)
			base.rules = append(base.rules, rule)
		} else {
			budgetPolicies = append(budgetPolicies, named)
			budgetRules = append(budgetRules, rule)
		}
	}
	for i, pol := range budgetPolicies {
		rs := c.byBudget[pol.Budget]
		if rs == nil {
			rs = &ruleSet{}
			c.byBudget[pol.Budget] = rs
		}
		rs.policies = append(rs.policies, pol)
		rs.rules = append(rs.rules, budgetRules[i])
	}
	// A budget's requests draw from the plan-wide policies too, first.
	for _, rs := range c.byBudget {
		rs.policies = append(append([]Policy(nil), base.policies...), rs.policies...)
		rs.rules = append(append([]Rule(nil), base.rules...), rs.rules...)
	}
	// Every rule, the plan-wide ones first, so that base is a prefix of
	// all.
	all.policies = append(append(all.policies, base.policies[1:]...), budgetPolicies...)
	all.rules = append(append(all.rules, base.rules[1:]...), budgetRules...)
	c.base, c.all = base, all
	return c, nil
}

// compilePolicy checks one policy of the plan called plan, and returns its
// rule and the policy with its name filled in.
func compilePolicy(plan string, pol Policy) (Rule, Policy, error) {
	hasLimit, hasQuota := pol.Limit != (Limit{}), !pol.Quota.IsZero()
	switch {
	case hasLimit == hasQuota:
		return Rule{}, pol, fmt.Errorf("%w: exactly one of Limit and Quota must be set", ErrInvalidLimit)
	case pol.Budget != "" && !ValidName(pol.Budget):
		return Rule{}, pol, invalidName("Budget", pol.Budget)
	case pol.Name != "" && !ValidName(pol.Name):
		return Rule{}, pol, invalidName("Name", pol.Name)
	}
	var rule Rule
	if hasQuota {
		if err := pol.Quota.Validate(); err != nil {
			return rule, pol, err
		}
		rule.Quota = pol.Quota
		period := "day"
		if pol.Quota.Period == Monthly {
			period = "month"
		}
		rule.Sub = period
		if pol.Budget != "" {
			rule.Sub = "b:" + pol.Budget + ":" + period
		}
		if pol.Name == "" {
			pol.Name = joinName(plan, pol.Budget, pol.Quota.Period.String())
		}
	} else {
		if err := pol.Limit.Validate(); err != nil {
			return rule, pol, err
		}
		rule.Limit = pol.Limit
		switch {
		case pol.Budget != "":
			rule.Sub = "b:" + pol.Budget
			if pol.Name == "" {
				pol.Name = joinName(plan, pol.Budget, "")
			}
		case pol.Name == "":
			return rule, pol, fmt.Errorf("%w: Name must be set on a token bucket without a Budget", ErrInvalidLimit)
		default:
			rule.Sub = "r:" + pol.Name
		}
	}
	if !ValidName(pol.Name) {
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

// samePlan reports whether a and b are the same plan, field by field.
func samePlan(a, b *Plan) bool {
	if a.Name != b.Name || a.Limit != b.Limit || len(a.Policies) != len(b.Policies) {
		return false
	}
	for i := range a.Policies {
		if a.Policies[i] != b.Policies[i] {
			return false
		}
	}
	return true
}

// A planCache keeps the compiled plans a Limiter has seen, by name: an entry
// whose plan no longer matches is replaced. Reads take no lock; the few
// writes copy the map.
type planCache struct {
	mu    sync.Mutex
	plans atomic.Pointer[map[string]*compiledPlan]
}

// maxCachedPlans bounds the cache against resolvers that make up a plan per
// tenant; past it, plans are compiled on each request.
const maxCachedPlans = 256

func (c *planCache) get(p *Plan) (*compiledPlan, error) {
	if m := c.plans.Load(); m != nil {
		if cp, ok := (*m)[p.Name]; ok && samePlan(&cp.plan, p) {
			return cp, nil
		}
	}
	cp, err := compile(*p)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var old map[string]*compiledPlan
	if m := c.plans.Load(); m != nil {
		old = *m
	}
	if _, replacing := old[p.Name]; replacing || len(old) < maxCachedPlans {
		next := make(map[string]*compiledPlan, len(old)+1)
		for k, v := range old {
			next[k] = v
		}
		next[p.Name] = cp
		c.plans.Store(&next)
	}
	return cp, nil
}
