package tollgate_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/storekit"
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

// A foreignStore is a memory store whose overrides and change log hold
// what a test puts there: what a store shared with other software, an older
// version or a hostile party could hold.
type foreignStore struct {
	*memory.Store
	overrides map[string][]byte
	notes     [][]byte
}

func (s *foreignStore) Do(ctx context.Context, op *storekit.Op) error {
	if op.Kind == storekit.LoadOverrides {
		op.Overrides, op.Notes, op.Version = maps.Clone(s.overrides), s.notes, 1
		return nil
	}
	return s.Store.Do(ctx, op)
}

// FuzzStoredOverrides: whatever a store holds as a tenant's override and
// as a change, the Limiter starts, decides on every tenant (the one the
// override is kept under on its plan or on the override, any other on its
// plan), lists the override under the tenant it applies to, and never
// panics.
func FuzzStoredOverrides(f *testing.F) {
	for _, seed := range []struct {
		tenant      string
		value, note string
	}{
		{"t", `{"tenant":"dA==","change":{"action":"override","override":{"plan":"growth"}}}`, `{"tenant":"dA==","change":{"action":"clear"}}`},
		{"t", `{"tenant":"dA==","change":{"action":"override","override":{"limits":[{"name":"free","limit":{"rate":5,"burst":50}}]}}}`, ""},
		{"t", `{"tenant":"dA==","change":{"action":"override","override":{"limits":[{"name":"free","quota":{"tokens":3}}],"expires_at":"2999-01-01T00:00:00Z"}}}`, "x"},
		{"t", `{"tenant":"b3RoZXI=","change":{"action":"override","override":{"plan":"enterprise"}}}`, ""},
		{"", `{}`, `{"tenant":"","change":{}}`},
		{"a\nb", `{"tenant":"YQpi","change":{"action":"override","override":{"plan":"growth"}}}`, "\xff"},
		{"t", `{"change":{"override":{"plan":"free+override","limits":[{"name":"free","in_flight":3}]}}}`, ""},
	} {
		f.Add(seed.tenant, []byte(seed.value), []byte(seed.note))
	}
	plans, err := tollgate.NewStaticResolver(tollgate.DefaultPlans(), "free", nil)
	if err != nil {
		f.Fatal(err)
	}
	known := map[string]bool{}
	for _, p := range tollgate.DefaultPlans() {
		known[p.Name], known[p.Name+"+override"] = true, true
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	f.Fuzz(func(t *testing.T, tenant string, value, note []byte) {
		store := &foreignStore{Store: memory.New(memory.WithSweepInterval(0)), overrides: map[string][]byte{tenant: value}, notes: [][]byte{note}}
		defer store.Close()
		l, err := tollgate.New(store, plans, tollgate.WithLogger(logger))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		ctx := context.Background()
		list, err := l.Overrides(ctx)
		if err != nil {
			t.Fatalf("Overrides: %v", err)
		}
		for _, c := range list {
			if c.Tenant != tenant {
				t.Fatalf("an override kept under %q is listed as %q's", tenant, c.Tenant)
			}
		}
		if _, err := l.Changes(ctx); err != nil {
			t.Fatalf("Changes: %v", err)
		}
		for _, who := range []string{tenant, "someone-else"} {
			d, err := l.Take(ctx, tollgate.Request{Tenant: who})
			if errors.Is(err, tollgate.ErrInvalidTenant) {
				if len(list) > 0 {
					t.Fatalf("the override of %q, which no request can have, is listed", who)
				}
				continue
			}
			if err != nil || !d.Allowed || !known[d.Plan] {
				t.Fatalf("tenant %q: plan %q, allowed %v, %v", who, d.Plan, d.Allowed, err)
			}
			if who != tenant && d.Plan != "free" {
				t.Fatalf("tenant %q, who has no override, decided on %q", who, d.Plan)
			}
			if strings.HasSuffix(d.Plan, "+override") && len(list) == 0 {
				t.Fatalf("tenant %q decided on %q, an override not listed", who, d.Plan)
			}
			if _, err := l.Inspect(ctx, who); err != nil {
				t.Fatalf("Inspect %q: %v", who, err)
			}
		}
	})
}
