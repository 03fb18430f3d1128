package adapterkit_test

import (
	"encoding/json"
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
		{Error: adapterkit.CodeRateLimited, Message: `rate limit exceeded (a"b\c): retry in 7s`, RetryAfter: 7, Policy: `a"b\c`},
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
	}
}
