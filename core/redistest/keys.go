package redistest

import (
	"fmt"
	"strings"
	"time"
)

// keysTimeout bounds each command of a key scan or deletion.
const keysTimeout = 10 * time.Second

// Keys returns the keys of database 0 of the Redis at addr that start with
// prefix, found with SCAN, so that a large database is not blocked as KEYS
// would block it. Keys written while it runs may be missed.
func Keys(addr, prefix string) ([]string, error) {
	var keys []string
	err := scan(addr, prefix, func(c *respConn, batch []string) error {
		keys = append(keys, batch...)
		return nil
	})
	return keys, err
}

// DeleteKeys deletes every key of database 0 of the Redis at addr that
// starts with prefix (SCAN, then UNLINK), and returns how many it deleted.
// An empty prefix is refused: it would empty the database.
func DeleteKeys(addr, prefix string) (int, error) {
	if prefix == "" {
		return 0, fmt.Errorf("redistest: DeleteKeys with an empty prefix would delete every key")
	}
	deleted := 0
	err := scan(addr, prefix, func(c *respConn, batch []string) error {
		n, err := c.do(append([]string{"UNLINK"}, batch...)...)
		if err != nil {
			return fmt.Errorf("UNLINK: %w", err)
		}
		if n, ok := n.(int64); ok {
			deleted += int(n)
		}
		return nil
	})
	return deleted, err
}

// scan calls found with each non-empty batch of the keys under prefix.
func scan(addr, prefix string, found func(c *respConn, batch []string) error) error {
	c, err := dialRESP(addr, keysTimeout)
	if err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	defer c.Close()
	cursor := "0"
	for {
		reply, err := c.do("SCAN", cursor, "MATCH", globEscape(prefix)+"*", "COUNT", "1000")
		if err != nil {
			return fmt.Errorf("redistest: SCAN on %s: %w", addr, err)
		}
		r, ok := reply.([]any)
		if !ok || len(r) != 2 {
			return fmt.Errorf("redistest: SCAN on %s: unexpected reply %v", addr, reply)
		}
		cursor, _ = r[0].(string)
		items, _ := r[1].([]any)
		batch := make([]string, 0, len(items))
		for _, k := range items {
			if k, ok := k.(string); ok {
				batch = append(batch, k)
			}
		}
		if len(batch) > 0 {
			if err := found(c, batch); err != nil {
				return fmt.Errorf("redistest: on %s: %w", addr, err)
			}
		}
		if cursor == "0" || cursor == "" {
			return nil
		}
	}
}

// globEscape quotes the characters that Redis's MATCH patterns treat
// specially, so that a prefix matches only itself.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\', '^', '-':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
