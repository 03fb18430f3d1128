package tollgate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
)

// TestOverrideOnTheMemoryStore: an override applies from the next
// decision, shows as the effective plan, ends at its expiry to the
// microsecond of the Limiter's clock, and keeps the tenant's usage.
func TestOverrideOnTheMemoryStore(t *testing.T) {
	l, clock := newLimiter(t, nil)
	ctx := context.Background()
	for range 15 {
		l.Take(ctx, tollgate.Request{Tenant: "t"})
	}
	err := l.Apply(ctx, tollgate.Change{Tenant: "t", Action: "override", Reason: "weekend", By: "ops",
		Override: tollgate.Override{Plan: "growth", ExpiresAt: clock.Now().Add(2 * time.Second)}})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := l.Take(ctx, tollgate.Request{Tenant: "t"})
	if d.Plan != "growth" || d.Remaining != 500-15*25-1 {
		t.Fatalf("under the override: plan %s, %d left; want growth with the 15 free tokens (15 x 25 growth tokens) still spent", d.Plan, d.Remaining)
	}
	clock.Advance(2*time.Second - time.Microsecond)
	if d, _ = l.Take(ctx, tollgate.Request{Tenant: "t"}); d.Plan != "growth" {
		t.Fatalf("a microsecond before the expiry: plan %s", d.Plan)
	}
	clock.Advance(time.Microsecond)
	if d, _ = l.Take(ctx, tollgate.Request{Tenant: "t"}); d.Plan != "free" {
		t.Fatalf("at the expiry: plan %s", d.Plan)
	}
	changes, err := l.Changes(ctx)
	if err != nil || len(changes) != 1 || changes[0].Reason != "weekend" || changes[0].By != "ops" || changes[0].Override.Plan != "growth" {
		t.Fatalf("change log %+v, %v", changes, err)
	}
	if list, _ := l.Overrides(ctx); len(list) != 0 {
		t.Fatalf("an expired override is listed: %+v", list)
	}
}

func TestApplyRefusesWhatCanNotApply(t *testing.T) {
	l, _ := newLimiter(t, nil)
	ctx := context.Background()
	cases := map[string]struct {
		c    tollgate.Change
		want error
	}{
		"unknown plan":    {tollgate.Change{Tenant: "t", Action: "override", Override: tollgate.Override{Plan: "platinum"}}, tollgate.ErrUnknownPlan},
		"unknown policy":  {tollgate.Change{Tenant: "t", Action: "override", Override: tollgate.Override{Limits: []tollgate.Policy{{Name: "free-daily", Quota: tollgate.Quota{Tokens: 5}}}}}, tollgate.ErrInvalidLimit},
		"invalid figures": {tollgate.Change{Tenant: "t", Action: "override", Override: tollgate.Override{Limits: []tollgate.Policy{{Name: "free", Limit: tollgate.Limit{Rate: -1, Burst: 5}}}}}, tollgate.ErrInvalidLimit},
		"nothing":         {tollgate.Change{Tenant: "t", Action: "override"}, tollgate.ErrInvalidLimit},
		"bad tenant":      {tollgate.Change{Tenant: "a\x00b", Action: "reset"}, tollgate.ErrInvalidTenant},
		"expired already": {tollgate.Change{Tenant: "t", Action: "override", Override: tollgate.Override{Plan: "growth", ExpiresAt: time.Unix(1, 0)}}, tollgate.ErrInvalidLimit},
		"unknown action":  {tollgate.Change{Tenant: "t", Action: "promote"}, nil},
		"bad policy name": {tollgate.Change{Tenant: "t", Action: "override", Override: tollgate.Override{Limits: []tollgate.Policy{{Name: "a b", Limit: tollgate.Limit{Rate: 1, Burst: 5}}}}}, tollgate.ErrInvalidLimit},
	}
	for name, c := range cases {
		err := l.Apply(ctx, c.c)
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	if changes, _ := l.Changes(ctx); len(changes) != 0 {
		t.Errorf("refused changes were logged: %+v", changes)
	}
}

// TestOverridesKeepTenantIDsByteForByte: a tenant ID that is not valid
// UTF-8 is listed, and matched, as it is.
func TestOverridesKeepTenantIDsByteForByte(t *testing.T) {
	store := memory.New(memory.WithSweepInterval(0))
	defer store.Close()
	plans, _ := tollgate.NewStaticResolver(tollgate.DefaultPlans(), "free", nil)
	l, err := tollgate.New(store, plans, tollgate.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tenant := range []string{"caf\xe9", "caf\xe8"} {
		if err := l.Apply(ctx, tollgate.Change{Tenant: tenant, Action: "override", Override: tollgate.Override{Plan: "growth"}}); err != nil {
			t.Fatal(err)
		}
	}
	list, _ := l.Overrides(ctx)
	if len(list) != 2 || list[0].Tenant != "caf\xe8" || list[1].Tenant != "caf\xe9" {
		t.Fatalf("overrides %q", list)
	}
	if d, _ := l.Take(ctx, tollgate.Request{Tenant: "caf\xe9"}); d.Plan != "growth" {
		t.Fatalf("plan %s", d.Plan)
	}
	if changes, _ := l.Changes(ctx); changes[0].Tenant != "caf\xe8" {
		t.Fatalf("newest change of %q", changes[0].Tenant)
	}
}
