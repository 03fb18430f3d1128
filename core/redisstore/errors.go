package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core/storekit"
)

var (
	errCircuitOpen = errors.New("redisstore: the circuit breaker is open: Redis failed repeatedly, calls are not sent until a probe succeeds")
	errQueueFull   = errors.New("redisstore: too many calls are waiting for Redis")
)

// An unavailableError is a call that Redis did not answer. It wraps
// ErrUnavailable and its cause, and names its kind for metrics.
type unavailableError struct {
	kind string
	err  error
}

func unavailable(kind string, err error) error { return &unavailableError{kind: kind, err: err} }

func (e *unavailableError) Error() string {
	msg := e.err.Error()
	if !strings.HasPrefix(msg, "redisstore:") {
		msg = "redisstore: " + msg
	}
	return msg
}

func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

// ErrorKind classifies the failure for metrics: "timeout", "connect",
// "circuit_open", "unavailable", "canceled", "deadline", "queue_full",
// "moved", "period".
func (e *unavailableError) ErrorKind() string { return e.kind }

// A redisError is an error reply that the script passed on in its own
// reply: a key of another type.
type redisError string

func (e redisError) Error() string { return string(e) }
func (e redisError) RedisError()   {}

// isReply reports whether err is an answer of Redis (an error reply)
// rather than a failure to get one.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

func isNoScript(err error) bool {
	return err != nil && isReply(err) && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// misconfigured lists the starts of the error replies that waiting will not
// mend: wrong credentials, missing ACL permissions, a database the server
// does not have, a command it does not know (renamed or disabled), a key of
// another type.
var misconfigured = []string{
	"NOPERM", "WRONGPASS", "NOAUTH", "WRONGTYPE",
	"ERR invalid DB index", "ERR DB index is out of range",
	"ERR unknown command", "ERR AUTH", "ERR Client sent AUTH",
	"ERR invalid password", "ERR invalid username",
}

// isMisconfigured reports whether err is an error reply that waiting will
// not mend. A permission error met inside the script comes back in the
// script's words, so the whole text is searched.
func isMisconfigured(err error) bool {
	if !isReply(err) {
		return false
	}
	msg := err.Error()
	for _, p := range misconfigured {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return strings.Contains(msg, "NOPERM") || strings.Contains(msg, "WRONGTYPE") ||
		strings.Contains(msg, "No permissions") || strings.Contains(msg, "can't run this command")
}

// callError turns the error of a call on key into the Store's.
func (s *Store) callError(ctx context.Context, key string, err error) error {
	switch {
	case isMisconfigured(err):
		return fmt.Errorf("%w: redisstore: %s: %w", storekit.ErrMisconfigured, key, err)
	case isReply(err) && (strings.HasPrefix(err.Error(), "MOVED") || strings.HasPrefix(err.Error(), "ASK")):
		// A slot is moving between the nodes of a cluster: the command was
		// not run. The next calls go where the new map says.
		if cc, ok := s.client.(*redis.ClusterClient); ok {
			cc.ReloadState(ctx)
		}
		return unavailable("moved", fmt.Errorf("redisstore: %s: %w", key, err))
	case errors.Is(err, context.DeadlineExceeded):
		// Only the round trip's own context has a deadline: the connection
		// did not come within its budget.
		return unavailable("connect", fmt.Errorf("redisstore: no connection to Redis within %v: %w", connectBudget(s.timeout), err))
	case isTimeout(err):
		return unavailable("timeout", fmt.Errorf("redisstore: no answer from Redis within %v of the write: %w", s.timeout, err))
	}
	return unavailable("unavailable", fmt.Errorf("redisstore: %s: %w", key, err))
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}
