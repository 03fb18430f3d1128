package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-go/tollgate/core/storekit"
)

// adminSource is the script that keeps overrides and the change log.
//
//go:embed admin.lua
var adminSource string

var adminScript = redis.NewScript(adminSource)

// adminKeys returns the keys of the overrides, the change log and their
// version. Their hash tag starts with '#' and is not a hashed tenant's
// (those are 43 characters more), so no tenant's key is among them.
func (s *Store) adminKeys() []string {
	tag := s.prefix + "{#admin}:"
	return []string{tag + "overrides", tag + "log", tag + "version"}
}

// admin applies a SaveOverride or a LoadOverrides, and logs a Reset's
// note. These are an operator's rare changes and the replicas' reads of
// them, so they go to Redis straight, not through the runners.
func (s *Store) admin(ctx context.Context, op *storekit.Op) error {
	var args []any
	switch op.Kind {
	case storekit.LoadOverrides:
		args = []any{"load", strconv.FormatInt(op.Version, 10)}
	case storekit.SaveOverride:
		args = []any{"save", op.Tenant, op.Value, op.Note, storekit.MaxNotes}
	default: // the note of a Reset
		args = []any{"note", op.Note, storekit.MaxNotes}
	}
	ctx, cancel := context.WithTimeout(ctx, connectBudget(s.timeout))
	defer cancel()
	keys := s.adminKeys()
	reply, err := adminScript.Run(ctx, s.client, keys, args...).Slice()
	if err != nil {
		return s.callError(ctx, keys[0], err)
	}
	if len(reply) == 0 {
		return unavailable("unavailable", fmt.Errorf("redisstore: an empty answer from admin.lua"))
	}
	version, err := strconv.ParseInt(fmt.Sprint(reply[0]), 10, 64)
	if err != nil {
		return unavailable("unavailable", fmt.Errorf("redisstore: admin.lua answered version %v", reply[0]))
	}
	op.Version = version
	op.Overrides, op.Notes = nil, nil
	if op.Kind != storekit.LoadOverrides || len(reply) < 3 {
		return nil
	}
	pairs, _ := reply[1].([]any)
	op.Overrides = make(map[string][]byte, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		op.Overrides[fmt.Sprint(pairs[i])] = []byte(fmt.Sprint(pairs[i+1]))
	}
	notes, _ := reply[2].([]any)
	for _, n := range notes {
		op.Notes = append(op.Notes, []byte(fmt.Sprint(n)))
	}
	return nil
}
