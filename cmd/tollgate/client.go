package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// apiPath is where applications mount the admin API, under their base URL.
const apiPath = "/admin/tollgate/api"

// A client calls the admin API of one application.
type client struct {
	base  *url.URL // the API's base
	token string
	http  *http.Client
}

func newClient(rawURL, token string, hc *http.Client) (*client, error) {
	if rawURL == "" {
		return nil, errors.New("TOLLGATE_URL is not set: set it to the application's base URL, such as http://127.0.0.1:8080")
	}
	if token == "" {
		return nil, errors.New("ADMIN_TOKEN is not set: set it to the admin token the application was started with")
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("TOLLGATE_URL %q is not an http or https URL", rawURL)
	}
	if strings.Trim(u.Path, "/") == "" {
		u.Path = apiPath
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return &client{base: u, token: token, http: hc}, nil
}

// call sends a request to the API path (segments are escaped) and decodes
// a JSON answer into out, if not nil. A 4xx or 5xx answer is an error that
// carries the API's reason.
func (c *client) call(ctx context.Context, method string, query url.Values, body, out any, segments ...string) error {
	u := *c.base
	// Tenants may hold any character, "/" included: each segment is
	// escaped on its own.
	u.RawPath = c.base.EscapedPath()
	for _, s := range segments {
		u.RawPath += "/" + url.PathEscape(s)
	}
	u.Path, _ = url.PathUnescape(u.RawPath)
	u.RawQuery = query.Encode()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, u.Redacted(), err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, u.Redacted(), err)
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error string `json:"error"`
		}
		reason := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			reason = e.Error
		}
		if len(reason) > 200 {
			reason = reason[:200] + "..."
		}
		return fmt.Errorf("%s %s: %s: %s", method, u.Path, resp.Status, reason)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: the answer is not the API's JSON: %w", method, u.Path, err)
	}
	return nil
}
