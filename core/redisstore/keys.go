package redisstore

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
)

// DefaultPrefix starts every key a Store writes unless WithPrefix says
// otherwise.
const DefaultPrefix = "tollgate:"

// maxRawTenant is the longest tenant ID that is written into its Redis key
// as it is. Longer IDs, and IDs with bytes that are not printable ASCII, are
// hashed, so a Redis key is never longer than the prefix plus 46 bytes.
const maxRawTenant = 64

// hashedMark starts the hash tag of a hashed tenant ID. A raw ID never
// starts with it, so a raw ID and a hashed one never share a key.
const hashedMark = '#'

// redisKey maps a tenant ID of any bytes and length to the key of the hash
// that holds its rule states: prefix + "{" + tag + "}". The tag is the ID
// itself when it is short, printable ASCII without braces and does not
// start with '#', and otherwise '#' and the unpadded base64url SHA-256 of
// the ID. The store chooses the whole hash tag, so no tenant ID can pick
// its Cluster slot or reach another tenant's key, and the mapping is one to
// one (up to a SHA-256 collision).
func redisKey(prefix, tenant string) string {
	if rawTenantOK(tenant) {
		return prefix + "{" + tenant + "}"
	}
	sum := sha256.Sum256([]byte(tenant))
	var b [1 + 43]byte
	b[0] = hashedMark
	base64.RawURLEncoding.Encode(b[1:], sum[:])
	return prefix + "{" + string(b[:]) + "}"
}

// inFlightKey returns the key of the sorted set that holds the leases of
// the in-flight cap called rule of the tenant whose hash is key: the key,
// ":f:" and the rule's name. It shares the hash's tag, and so its Cluster
// slot; no hash's key, which ends at its tag, is ever one.
func inFlightKey(key, rule string) string { return key + ":f:" + rule }

func rawTenantOK(tenant string) bool {
	if len(tenant) == 0 || len(tenant) > maxRawTenant || tenant[0] == hashedMark {
		return false
	}
	for i := 0; i < len(tenant); i++ {
		c := tenant[i]
		if c <= ' ' || c > '~' || c == '{' || c == '}' {
			return false
		}
	}
	return true
}

func checkPrefix(prefix string) error {
	// A brace in the prefix would make the prefix, not the tenant, the
	// Cluster hash tag, and put every tenant in one slot.
	if strings.ContainsAny(prefix, "{}") {
		return fmt.Errorf("the key prefix %q must not contain '{' or '}'", prefix)
	}
	if len(prefix) > 256 {
		return fmt.Errorf("the key prefix is %d bytes long; at most 256 are allowed", len(prefix))
	}
	return nil
}
