package admin

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
)

// A credential is one labelled token, as the handler checks it.
type credential struct {
	label string
	hash  [sha256.Size]byte // of the token
	csrf  string            // the page's anti-forgery token for it
	basic bool              // set on the copy a request authenticated with
}

func newCredentials(tokens map[string]string) ([]credential, error) {
	if len(tokens) == 0 {
		return nil, errors.New("admin: New: Config.Tokens is empty: give at least one labelled token, such as {\"admin\": os.Getenv(\"ADMIN_TOKEN\")}")
	}
	labels := make([]string, 0, len(tokens))
	for label := range tokens {
		labels = append(labels, label)
	}
	slices.Sort(labels)
	seen := map[string]string{}
	creds := make([]credential, 0, len(tokens))
	for _, label := range labels {
		token := tokens[label]
		switch {
		case label == "" || len(label) > maxLabelLength || strings.IndexFunc(label, unicode.IsControl) >= 0:
			return nil, fmt.Errorf("admin: New: Config.Tokens: label %q must be 1 to %d bytes without control characters", label, maxLabelLength)
		case token == "":
			return nil, fmt.Errorf("admin: New: Config.Tokens[%q]: the token is empty", label)
		case strings.IndexFunc(token, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
			return nil, fmt.Errorf("admin: New: Config.Tokens[%q]: the token holds a space or a control character, which no Authorization header can carry", label)
		case seen[token] != "":
			return nil, fmt.Errorf("admin: New: Config.Tokens: labels %q and %q have the same token, so changes could not be told apart", seen[token], label)
		}
		seen[token] = label
		creds = append(creds, credential{label: label, hash: sha256.Sum256([]byte(token)), csrf: csrfToken(token)})
	}
	return creds, nil
}

// csrfToken derives the anti-forgery token of a credential from its
// token, so that every replica with the same credentials accepts the
// token any of them embedded in its page, and a page that does not know
// the credential can not compute it.
func csrfToken(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("tollgate admin: anti-forgery token"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// authenticate returns the credential r carries, or answers 401, or 429
// for a client address locked out after too many failures.
func (h *handler) authenticate(w http.ResponseWriter, r *http.Request) (credential, bool) {
	addr := h.clientOf(r)
	now := h.now()
	if until := h.failures.lockedUntil(addr, now); !until.IsZero() {
		// A locked-out address gets no answer about its credentials at
		// all, or it could go on guessing.
		secs := int64(math.Ceil(until.Sub(now).Seconds()))
		w.Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
		writeError(w, http.StatusTooManyRequests, fmt.Sprintf(
			"too many failed credentials from this address: try again in %d s", max(secs, 1)))
		return credential{}, false
	}
	token, basic, given := credentials(r)
	if given {
		sum := sha256.Sum256([]byte(token))
		match := -1
		// Every credential is compared, each in constant time on equal
		// lengths (the hashes'), so that the time taken tells nothing of
		// which one matched or how much of a token was right.
		for i := range h.creds {
			if subtle.ConstantTimeCompare(sum[:], h.creds[i].hash[:]) == 1 {
				match = i
			}
		}
		if match >= 0 {
			c := h.creds[match]
			c.basic = basic
			return c, true
		}
		if n, locked := h.failures.fail(addr, now); locked {
			h.logger.LogAttrs(r.Context(), slog.LevelWarn, "tollgate admin: client locked out after failed credentials",
				slog.String("client", addr), slog.Int("failures", n), slog.Duration("for", failureWindow))
		}
	}
	w.Header().Set("WWW-Authenticate", `Basic realm="tollgate", charset="UTF-8"`)
	reason := "this page and API need the admin token: a browser asks for it (any user name, the token as the password); scripts send Authorization: Bearer <token>"
	if given {
		reason = "the credentials are not valid"
	}
	writeError(w, http.StatusUnauthorized, reason)
	return credential{}, false
}

// credentials returns the token of r's Authorization header: a Bearer
// token, or the password of HTTP Basic. given reports that r had an
// Authorization header at all; a malformed one counts as a failed
// credential.
func credentials(r *http.Request) (token string, basic, given bool) {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return "", false, false
	}
	scheme, rest, _ := strings.Cut(auth, " ")
	switch {
	case strings.EqualFold(scheme, "Bearer"):
		return strings.TrimSpace(rest), false, true
	case strings.EqualFold(scheme, "Basic"):
		_, password, ok := r.BasicAuth()
		if !ok {
			return "", true, true
		}
		return password, true, true
	}
	return "", false, true
}

// checkChange refuses a change that a cross-site page could have made the
// browser send: one whose Origin or Sec-Fetch-Site headers say it came
// from another site, and one authenticated with Basic credentials (which a
// browser sends by itself) without the page's anti-forgery token. Bearer
// credentials are never sent by a browser on its own.
func (h *handler) checkChange(w http.ResponseWriter, r *http.Request, c credential, csrf string) bool {
	if err := h.origins.Check(r); err != nil {
		writeError(w, http.StatusForbidden, "a change must come from the page itself: this request came from another site")
		return false
	}
	if c.basic && subtle.ConstantTimeCompare([]byte(csrf), []byte(c.csrf)) != 1 {
		writeError(w, http.StatusForbidden, "a change with Basic credentials needs the page's anti-forgery token "+
			"(the page's forms carry it, as the csrf field or the X-CSRF-Token header); scripts send Authorization: Bearer <token> instead")
		return false
	}
	return true
}

// Failed credentials are counted per client address over a minute from
// the first; an address that fails maxFailures times is refused until
// that minute is over.
const (
	maxFailures   = 20
	failureWindow = time.Minute

	// maxAddresses bounds the addresses counted at once. Past it (a
	// client that rotates addresses), every new address shares one
	// count, so rotating buys no more guesses.
	maxAddresses = 10_000
)

// failures counts failed credentials by client address, in bounded
// memory. It is safe for concurrent use.
type failures struct {
	mu        sync.Mutex
	byAddr    map[string]failureCount
	overflow  failureCount // of the addresses past maxAddresses
	lastSweep time.Time
}

type failureCount struct {
	start time.Time // of the first failure of the window
	n     int
}

func (f *failures) init() { f.byAddr = make(map[string]failureCount) }

// lockedUntil returns when addr may try again, or the zero Time if it may
// now.
func (f *failures) lockedUntil(addr string, now time.Time) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, _ := f.slot(addr, now)
	if end := c.start.Add(failureWindow); c.n >= maxFailures && now.Before(end) {
		return end
	}
	return time.Time{}
}

// fail counts a failure of addr and returns the failures of its window,
// and whether this one locked it out.
func (f *failures) fail(addr string, now time.Time) (n int, locked bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, own := f.slot(addr, now)
	c = c.add(now)
	if own {
		f.byAddr[addr] = c
	} else {
		f.overflow = c
	}
	return c.n, c.n == maxFailures
}

// slot returns addr's count; own reports that addr has, or may have, an
// entry of its own, and not the shared one of the addresses past
// maxAddresses.
func (f *failures) slot(addr string, now time.Time) (c failureCount, own bool) {
	if c, ok := f.byAddr[addr]; ok {
		return c, true
	}
	if len(f.byAddr) >= maxAddresses && now.Sub(f.lastSweep) >= time.Second {
		f.sweep(now)
	}
	if len(f.byAddr) < maxAddresses {
		return failureCount{}, true
	}
	return f.overflow, false
}

func (c failureCount) add(now time.Time) failureCount {
	if c.n == 0 || !now.Before(c.start.Add(failureWindow)) {
		return failureCount{start: now, n: 1}
	}
	c.n++
	return c
}

// sweep forgets the addresses whose window is over. It runs at most once
// a second, and only when the table is full, so a flood of new addresses
// costs one pass a second.
func (f *failures) sweep(now time.Time) {
	f.lastSweep = now
	for addr, c := range f.byAddr {
		if !now.Before(c.start.Add(failureWindow)) {
			delete(f.byAddr, addr)
		}
	}
}
