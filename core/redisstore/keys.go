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

// maxRawKey is the longest tenant key that is written into the Redis key as
// it is. Longer keys, and keys with bytes that are not printable ASCII, are
// hashed, so a Redis key is never longer than the prefix plus 66 bytes.
const maxRawKey = 64

// hashedMark starts the hash tag of a hashed key. A raw key never starts
// with it, so a raw key and a hashed key can never be the same Redis key.
const hashedMark = '#'

// redisKey maps a tenant key of any bytes and length to the Redis key of its
// bucket: prefix + "{" + tag + "}". The tag is either the tenant key itself,
// when it is short, printable ASCII without braces and does not start with
// '#', or '#' and the unpadded base64url SHA-256 of the tenant key. The
// whole hash tag is chosen here, so no tenant key can pick its Cluster slot
// or reach another tenant's bucket, and the mapping is one to one (up to a
// SHA-256 collision).
func redisKey(prefix, key string) string {
	if rawKeyOK(key) {
		return prefix + "{" + key + "}"
	}
	sum := sha256.Sum256([]byte(key))
	var b [1 + 43]byte
	b[0] = hashedMark
	base64.RawURLEncoding.Encode(b[1:], sum[:])
	return prefix + "{" + string(b[:]) + "}"
}

func rawKeyOK(key string) bool {
	if len(key) == 0 || len(key) > maxRawKey || key[0] == hashedMark {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
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
		return fmt.Errorf("redisstore: the key prefix %q must not contain '{' or '}'", prefix)
	}
	if len(prefix) > 256 {
		return fmt.Errorf("redisstore: the key prefix is %d bytes long; at most 256 are allowed", len(prefix))
	}
	return nil
}

// slot returns the Redis Cluster hash slot of a key made by redisKey: the
// CRC16 (XMODEM) of its hash tag, modulo 16384.
func slot(rkey string) int {
	open := strings.IndexByte(rkey, '{')
	tag := rkey[open+1 : len(rkey)-1]
	return int(crc16(tag) & 16383)
}

var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

func crc16(s string) uint16 {
	var c uint16
	for i := 0; i < len(s); i++ {
		c = c<<8 ^ crc16Table[byte(c>>8)^s[i]]
	}
	return c
}
