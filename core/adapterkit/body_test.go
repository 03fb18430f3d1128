package adapterkit_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/tollgate-go/tollgate/core/adapterkit"
)

// TestBodyJSON: MarshalJSON and AppendJSON write one encoding, which the
// struct tags read back.
func TestBodyJSON(t *testing.T) {
	for _, b := range []adapterkit.Body{
		adapterkit.MissingTenantBody,
		adapterkit.InvalidTenantBody,
		adapterkit.InternalErrorBody,
		adapterkit.CancelledBody,
		{Error: adapterkit.CodeRateLimited, Message: `rate limit exceeded (a"b\c): retry in 7s`, RetryAfter: 7, Policy: `a"b\c`,
			Type: adapterkit.ProblemQuotaExceeded, Title: adapterkit.TitleQuotaExceeded, Status: http.StatusTooManyRequests,
			Violated: `a"b\c,free-daily`},
	} {
		out, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		if want := string(b.AppendJSON(nil)); string(out)+"\n" != want {
			t.Errorf("json.Marshal gives %s, AppendJSON %s", out, want)
		}
		var back adapterkit.Body
		if err := json.Unmarshal(out, &back); err != nil || back != b {
			t.Errorf("%s reads back as %+v (%v), want %+v", out, back, err, b)
		}
		// RFC 9457: the standard members, and the draft's violated
		// policies as an array of strings.
		var problem struct {
			Type, Title, Detail string
			Status              int
			Violated            []string `json:"violated-policies"`
		}
		if err := json.Unmarshal(out, &problem); err != nil || problem.Type == "" || problem.Title == "" ||
			problem.Status != b.Status || problem.Detail != b.Message || !slices.Equal(problem.Violated, b.ViolatedPolicies()) {
			t.Errorf("%s: problem %+v (%v)", out, problem, err)
		}
	}
}
