package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"
)

// The admin API's JSON, as far as the CLI reads it.
type (
	tenantState struct {
		Tenant   string    `json:"tenant"`
		Plan     string    `json:"plan"`
		Override *override `json:"override"`
		Policies []struct {
			Name         string `json:"name"`
			Limit        int64  `json:"limit"`
			Remaining    int64  `json:"remaining"`
			ResetSeconds int64  `json:"reset_seconds"`
		} `json:"policies"`
	}
	override struct {
		Tenant    string     `json:"tenant,omitempty"`
		Plan      string     `json:"plan"`
		ExpiresAt *time.Time `json:"expires_at"`
		Reason    string     `json:"reason"`
		SetBy     string     `json:"set_by,omitempty"`
	}
	overrideList struct {
		Overrides []override `json:"overrides"`
	}
	candidates struct {
		Window     string `json:"window"`
		Candidates []struct {
			Tenant            string `json:"tenant"`
			Plan              string `json:"plan"`
			Requests          int64  `json:"requests"`
			ThrottledRequests int64  `json:"throttled_requests"`
			ThrottledTokens   int64  `json:"throttled_tokens"`
		} `json:"candidates"`
	}
)

// A printer writes a command's answer: as the API's JSON with --json, for a
// person otherwise.
type printer struct {
	out  io.Writer
	json bool
}

// print writes v as JSON, or calls human.
func (p printer) print(v any, human func(w io.Writer)) error {
	if p.json {
		enc := json.NewEncoder(p.out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(p.out, 0, 4, 2, ' ', 0)
	human(tw)
	return tw.Flush()
}

func inspect(ctx context.Context, c *client, p printer, tenant string) error {
	var st tenantState
	if err := c.call(ctx, "GET", nil, nil, &st, "tenants", tenant); err != nil {
		return err
	}
	return p.print(st, func(w io.Writer) {
		fmt.Fprintf(w, "tenant\t%s\n", display(st.Tenant))
		fmt.Fprintf(w, "plan\t%s\n", st.Plan)
		fmt.Fprintf(w, "override\t%s\n", describe(st.Override))
		fmt.Fprintf(w, "\npolicy\tlimit\tremaining\tfull in\n")
		for _, pol := range st.Policies {
			fmt.Fprintf(w, "%s\t%d\t%d\t%s\n", pol.Name, pol.Limit, pol.Remaining, time.Duration(pol.ResetSeconds)*time.Second)
		}
	})
}

func describe(o *override) string {
	if o == nil {
		return "none"
	}
	s := "plan " + o.Plan
	if o.ExpiresAt != nil {
		s += ", until " + o.ExpiresAt.Local().Format(time.RFC3339)
	}
	if o.Reason != "" {
		s += ", reason: " + display(o.Reason)
	}
	return s
}

func reset(ctx context.Context, c *client, p printer, tenant, reason string) error {
	var st tenantState
	if err := c.call(ctx, "POST", nil, map[string]string{"reason": reason}, &st, "tenants", tenant, "reset"); err != nil {
		return err
	}
	return p.print(st, func(w io.Writer) { fmt.Fprintf(w, "reset %s: every policy is full again\n", display(tenant)) })
}

func setOverride(ctx context.Context, c *client, p printer, tenant, plan string, d time.Duration, reason string) error {
	body := map[string]any{"plan": plan, "reason": reason}
	if d > 0 {
		body["expires_in_seconds"] = int64((d + time.Second - 1) / time.Second)
	}
	var st tenantState
	if err := c.call(ctx, "PUT", nil, body, &st, "tenants", tenant, "override"); err != nil {
		return err
	}
	return p.print(st, func(w io.Writer) { fmt.Fprintf(w, "%s: %s\n", display(tenant), describe(st.Override)) })
}

func clearOverride(ctx context.Context, c *client, p printer, tenant, reason string) error {
	var st tenantState
	q := url.Values{}
	if reason != "" {
		q.Set("reason", reason)
	}
	if err := c.call(ctx, "DELETE", q, nil, &st, "tenants", tenant, "override"); err != nil {
		return err
	}
	return p.print(st, func(w io.Writer) { fmt.Fprintf(w, "%s: override cleared, plan %s\n", display(tenant), st.Plan) })
}

func listOverrides(ctx context.Context, c *client, p printer) error {
	var list overrideList
	if err := c.call(ctx, "GET", nil, nil, &list, "overrides"); err != nil {
		return err
	}
	return p.print(list, func(w io.Writer) {
		if len(list.Overrides) == 0 {
			fmt.Fprintln(w, "no overrides")
			return
		}
		fmt.Fprintf(w, "tenant\tplan\texpires\treason\tset by\n")
		for _, o := range list.Overrides {
			expires := "never"
			if o.ExpiresAt != nil {
				expires = o.ExpiresAt.Local().Format(time.RFC3339)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", display(o.Tenant), o.Plan, expires, display(o.Reason), display(o.SetBy))
		}
	})
}

func top(ctx context.Context, c *client, p printer, window string, n int) error {
	var cs candidates
	q := url.Values{"window": {window}, "n": {fmt.Sprint(n)}}
	if err := c.call(ctx, "GET", q, nil, &cs, "candidates"); err != nil {
		return err
	}
	return p.print(cs, func(w io.Writer) {
		if len(cs.Candidates) == 0 {
			fmt.Fprintf(w, "no tenant was throttled in the last %s\n", window)
			return
		}
		fmt.Fprintf(w, "tenant\tplan\tthrottled tokens\tthrottled requests\trequests\n")
		for _, cd := range cs.Candidates {
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\n", display(cd.Tenant), cd.Plan, cd.ThrottledTokens, cd.ThrottledRequests, cd.Requests)
		}
	})
}

// display returns s as it can be shown on a terminal: quoted if it holds
// invalid UTF-8, a control character or a bidi control, which could hide
// or reorder what follows.
func display(s string) string {
	if !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !unicode.IsGraphic(r) || unicode.Is(unicode.Bidi_Control, r) || r == '\t' {
			return strconv.Quote(s)
		}
	}
	return s
}
