package redisstore

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// misconfigPrefixes start the Redis errors that waiting will not mend:
// wrong credentials, missing ACL permissions, a database index the server
// does not have, a command the server does not know (renamed or disabled).
var misconfigPrefixes = []string{
	"NOPERM", "WRONGPASS", "NOAUTH",
	"ERR invalid DB index", "ERR DB index is out of range",
	"ERR unknown command", "ERR AUTH", "ERR Client sent AUTH",
	"ERR invalid password", "ERR invalid username",
}

// isMisconfig reports whether err is a Redis error that waiting will not
// mend. A permission error raised inside the script reaches the client in
// the script's own words ("The user executing the script can't run this
// command"), so the whole text is searched.
func isMisconfig(err error) bool {
	var re redis.Error
	if err == nil || !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	for _, p := range misconfigPrefixes {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return strings.Contains(msg, "NOPERM") || strings.Contains(msg, "No permissions") ||
		strings.Contains(msg, "user executing the script can't")
}
