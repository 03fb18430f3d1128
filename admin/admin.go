package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/tollgatehttp"
	"github.com/tollgate-go/tollgate/insights"
)

// Config configures the handler that New returns; New reads it once.
// Limiter and Tokens are required: the zero Config is not valid.
type Config struct {
	// Limiter is the Limiter whose tenants the handler inspects and
	// changes. Changes reach every replica that shares its store.
	Limiter *tollgate.Limiter

	// Tracker, if set, gives the upgrade candidates that the page lists
	// and that GET api/candidates returns; without it there are none.
	Tracker *insights.Tracker

	// Tokens are the credentials the handler accepts, by label: the label
	// names the operator's credential in the change log and in logs, the
	// token is the secret. At least one is needed.
	Tokens map[string]string

	// TrustedProxies are the proxies whose X-Forwarded-For a request's
	// client address is read from, as tollgatehttp.ClientIP reads it;
	// failed credentials are counted by that address. Without them, the
	// direct peer is the client.
	TrustedProxies []netip.Prefix

	// Logger receives a warning when a client address is locked out for
	// failing its credentials; nil means slog.Default(). Changes are
	// logged by the Limiter, with their reason and the credential's label.
	Logger *slog.Logger

	now func() time.Time // of the failure counts; tests set it
}

// Bounds of what the handler accepts.
const (
	maxLabelLength  = 64
	maxReasonLength = 500 // bytes
	maxBodyBytes    = 64 << 10
	maxExpiry       = 10 * 365 * 24 * time.Hour
)

// New returns an http.Handler that serves the operator's page and JSON API
// for cfg.Limiter (see the package documentation). It fails, naming the
// field, on a nil Limiter, no Tokens, an empty label or token, a label
// longer than 64 bytes or with a control character, a token with a space
// or a control character, and two labels with one token. The handler is
// safe for concurrent use.
func New(cfg Config) (http.Handler, error) {
	if cfg.Limiter == nil {
		return nil, errors.New("admin: New: Config.Limiter is nil")
	}
	creds, err := newCredentials(cfg.Tokens)
	if err != nil {
		return nil, err
	}
	h := &handler{
		limiter:  cfg.Limiter,
		tracker:  cfg.Tracker,
		creds:    creds,
		clientOf: tollgatehttp.TenantFromClientIP(cfg.TrustedProxies...),
		logger:   cfg.Logger,
		now:      cfg.now,
		origins:  http.NewCrossOriginProtection(),
	}
	if h.logger == nil {
		h.logger = slog.Default()
	}
	if h.now == nil {
		h.now = time.Now
	}
	h.failures.init()
	return h, nil
}

type handler struct {
	limiter  *tollgate.Limiter
	tracker  *insights.Tracker
	creds    []credential
	clientOf func(*http.Request) string
	logger   *slog.Logger
	now      func() time.Time
	origins  *http.CrossOriginProtection
	failures failures
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	cred, ok := h.authenticate(w, r)
	if !ok {
		return
	}
	segs, err := segments(r.URL)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	switch {
	case len(segs) == 0:
		h.page(w, r, cred)
	case segs[0] == "api":
		h.api(w, r, cred, segs[1:])
	default:
		writeError(w, http.StatusNotFound, "no such page: the page is at the handler's root, the API under api/")
	}
}

// segments splits u's path into its unescaped segments, so that a tenant
// ID holding "/" (sent as %2F) stays one segment. A trailing slash adds
// no segment: "" and "/" are the page.
func segments(u *url.URL) ([]string, error) {
	p := strings.TrimPrefix(u.EscapedPath(), "/")
	p = strings.TrimSuffix(p, "/")
	if p == "" {
		return nil, nil
	}
	parts := strings.Split(p, "/")
	for i, s := range parts {
		v, err := url.PathUnescape(s)
		if err != nil {
			return nil, fmt.Errorf("the path is not valid: %v", err)
		}
		parts[i] = v
	}
	return parts, nil
}

// writeJSON writes v as the answer, with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// writeError answers {"error": reason} with status.
func writeError(w http.ResponseWriter, status int, reason string) {
	writeJSON(w, status, map[string]string{"error": reason})
}

// checkReason reports why an operator's reason can not be kept in the
// change log: too long, not UTF-8, or holding a control character, which
// could forge lines of a log that is not JSON.
func checkReason(s string) error {
	switch {
	case len(s) > maxReasonLength:
		return fmt.Errorf("reason: at most %d bytes, got %d", maxReasonLength, len(s))
	case !utf8.ValidString(s):
		return errors.New("reason: not valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("reason: holds the control character %U; give one line of text", r)
		}
	}
	return nil
}
