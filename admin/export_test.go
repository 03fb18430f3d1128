package admin

import (
	"net/http"
	"time"
)

// WithClock makes the handler that New returns for cfg count failed
// credentials by the time now gives.
func WithClock(cfg *Config, now func() time.Time) { cfg.now = now }

// Bounds of the failure counts, for tests.
const (
	MaxFailures   = maxFailures
	FailureWindow = failureWindow
	MaxAddresses  = maxAddresses
)

// CSRFToken returns the anti-forgery token of token.
var CSRFToken = csrfToken

// FailureAddresses returns how many client addresses h counts failures of.
func FailureAddresses(h http.Handler) int {
	f := &h.(*handler).failures
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.byAddr)
}
