package admin_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestCLIAgainstTheAPI runs the operator's CLI, cmd/tollgate, against the
// handler, so that the two keep to one contract.
func TestCLIAgainstTheAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/tollgate")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build cmd/tollgate with")
	}
	bin := filepath.Join(t.TempDir(), "tollgate")
	build := exec.Command(goTool, "build", "-o", bin, ".")
	build.Dir = filepath.Join("..", "cmd", "tollgate")
	build.Env = append(os.Environ(), "GOWORK=off") // a module of its own, with no requirements
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building cmd/tollgate: %v\n%s", err, out)
	}
	r := newTestReplica(t, nil)
	// 130 requests against a burst of 100: about 30 throttled, fewer if
	// the bucket refilled meanwhile on a slow machine (Redis keeps the
	// time, so no clock is injected); top must show the count made.
	throttled := 0
	for range 130 {
		if !take(t, r.limiter, "initech", 1).Allowed {
			throttled++
		}
	}
	cli := func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"TOLLGATE_URL=" + r.srv.URL, "ADMIN_TOKEN=" + token}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	jsonOf := func(args ...string) map[string]any {
		t.Helper()
		out, err := cli(append([]string{"--json"}, args...)...)
		if err != nil {
			t.Fatalf("tollgate %v: %v\n%s", args, err, out)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("tollgate %v: %v\n%s", args, err, out)
		}
		return v
	}

	if v := jsonOf("inspect", "initech"); v["plan"] != "startup" {
		t.Fatalf("inspect: %v", v)
	}
	if v := jsonOf("override", "set", "initech", "growth", "--for", "48h", "--reason", "weekend"); v["plan"] != "growth" {
		t.Fatalf("override set: %v", v)
	}
	if d := take(t, r.limiter, "initech", 1); d.Plan != "growth" {
		t.Fatalf("after override set the Limiter decides on %s", d.Plan)
	}
	if v := jsonOf("override", "list"); len(v["overrides"].([]any)) != 1 {
		t.Fatalf("override list: %v", v)
	}
	if out, err := cli("top", "--window", "1h"); err != nil || throttled == 0 || !slices.ContainsFunc(strings.Split(out, "\n"), func(line string) bool {
		f := strings.Fields(line)
		return len(f) == 5 && f[0] == "initech" && f[3] == strconv.Itoa(throttled)
	}) {
		t.Fatalf("top: %v; want initech with %d throttled requests\n%s", err, throttled, out)
	}
	if out, err := cli("reset", "initech", "--reason", "throttled by mistake"); err != nil || !strings.Contains(out, "full again") {
		t.Fatalf("reset: %v\n%s", err, out)
	}
	if v := jsonOf("override", "clear", "initech", "--reason", "done"); v["plan"] != "startup" || v["override"] != nil {
		t.Fatalf("override clear: %v", v)
	}
	out, err := cli("override", "set", "initech", "platinum")
	if err == nil || !strings.Contains(out, "400 Bad Request") || !strings.Contains(out, "unknown plan") || strings.Count(out, "\n") != 1 {
		t.Fatalf("an unknown plan: %v\n%s", err, out)
	}
	changes, _ := r.limiter.Changes(t.Context())
	if len(changes) != 3 || changes[0].Reason != "done" || changes[2].Reason != "weekend" || changes[2].By != "admin" {
		t.Fatalf("changes: %+v", changes)
	}
}
