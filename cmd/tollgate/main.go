// Command tollgate speaks to the admin API of an application that uses
// tollgate: it inspects and resets tenants, sets and clears their overrides,
// and lists the tenants that hit their limits most.
//
//	TOLLGATE_URL=http://127.0.0.1:8080 ADMIN_TOKEN=... tollgate inspect acme
//
// Usage:
//
//	tollgate [--json] inspect TENANT
//	tollgate [--json] reset TENANT [--reason TEXT]
//	tollgate [--json] override set TENANT PLAN [--for DURATION] [--reason TEXT]
//	tollgate [--json] override clear TENANT [--reason TEXT]
//	tollgate [--json] override list
//	tollgate [--json] top [--window 1h|24h|7d] [--n 20]
//
// TOLLGATE_URL is the application's base URL; the API is at
// /admin/tollgate/api under it unless the URL has a path of its own.
// ADMIN_TOKEN is the admin token the application was started with. Every
// failure prints one line to standard error and exits with status 1 (2 for
// a usage mistake).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr, http.DefaultClient)
	stop()
	os.Exit(code)
}

// errUsage marks a mistake in the command line, which exits with status 2.
var errUsage = errors.New("usage")

// run runs the command line args and returns the exit status.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, hc *http.Client) int {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := dispatch(ctx, args, getenv, stdout, hc)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintln(stderr, "tollgate:", err)
		fmt.Fprintln(stderr, "usage: tollgate [--json] inspect|reset|override set|override clear|override list|top ... (tollgate help)")
		return 2
	default:
		fmt.Fprintln(stderr, "tollgate:", oneLine(err.Error()))
		return 1
	}
}

const help = `tollgate: operate the rate limits of an application that uses tollgate

  tollgate [--json] inspect TENANT
  tollgate [--json] reset TENANT [--reason TEXT]
  tollgate [--json] override set TENANT PLAN [--for DURATION] [--reason TEXT]
  tollgate [--json] override clear TENANT [--reason TEXT]
  tollgate [--json] override list
  tollgate [--json] top [--window 1h|24h|7d] [--n 20]

Environment: TOLLGATE_URL (the application's base URL) and ADMIN_TOKEN.
`

func dispatch(ctx context.Context, args []string, getenv func(string) string, out io.Writer, hc *http.Client) error {
	f, rest, err := parseFlags(args)
	if err != nil {
		return err
	}
	if len(rest) == 0 || rest[0] == "help" || rest[0] == "-h" || rest[0] == "--help" {
		_, err := io.WriteString(out, help)
		return err
	}
	c, err := newClient(getenv("TOLLGATE_URL"), getenv("ADMIN_TOKEN"), hc)
	if err != nil {
		return err
	}
	p := printer{out: out, json: f.json}
	switch cmd := rest[0]; {
	case cmd == "inspect" && len(rest) == 2:
		return inspect(ctx, c, p, rest[1])
	case cmd == "reset" && len(rest) == 2:
		return reset(ctx, c, p, rest[1], f.reason)
	case cmd == "override" && len(rest) == 4 && rest[1] == "set":
		return setOverride(ctx, c, p, rest[2], rest[3], f.duration, f.reason)
	case cmd == "override" && len(rest) == 3 && rest[1] == "clear":
		return clearOverride(ctx, c, p, rest[2], f.reason)
	case cmd == "override" && len(rest) == 2 && rest[1] == "list":
		return listOverrides(ctx, c, p)
	case cmd == "top" && len(rest) == 1:
		return top(ctx, c, p, f.window, f.n)
	}
	return fmt.Errorf("%w: unknown command or wrong number of arguments: %q", errUsage, rest)
}

// flags are the options a command line may carry, anywhere in it.
type flags struct {
	json     bool
	reason   string
	duration time.Duration
	window   string
	n        int
}

func parseFlags(args []string) (flags, []string, error) {
	f := flags{window: "24h", n: 20}
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		value := func() (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("%w: %s needs a value", errUsage, a)
			}
			i++
			return args[i], nil
		}
		var err error
		switch a {
		case "--json", "-json":
			f.json = true
		case "--reason", "-reason":
			f.reason, err = value()
		case "--for", "-for":
			var v string
			if v, err = value(); err == nil {
				if f.duration, err = time.ParseDuration(v); err != nil || f.duration <= 0 {
					err = fmt.Errorf("%w: --for %q is not a positive duration such as 90m or 48h", errUsage, v)
				}
			}
		case "--window", "-window":
			f.window, err = value()
		case "--n", "-n":
			var v string
			if v, err = value(); err == nil {
				if _, scanErr := fmt.Sscanf(v, "%d", &f.n); scanErr != nil || f.n < 1 {
					err = fmt.Errorf("%w: --n %q is not a positive number", errUsage, v)
				}
			}
		case "--":
			rest = append(rest, args[i+1:]...)
			i = len(args)
		default:
			rest = append(rest, a)
		}
		if err != nil {
			return f, nil, err
		}
	}
	return f, rest, nil
}

// oneLine keeps the first line of s, so that every failure is one line.
func oneLine(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' || s[i] == '\r' {
			return s[:i]
		}
	}
	return s
}
