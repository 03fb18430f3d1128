package redisstore

import (
	"context"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// dialHook is the Store's go-redis hook, on the client whose pool dials
// the connections, whose connections recover a reply that arrived before
// their read deadline but was not read by then, and a write that was not
// made by its deadline. On a machine whose CPU is saturated the runtime
// may run the timer that ends a read deadline before it notices the reply
// that came in, and the read then fails with the reply waiting in the
// socket; a read that meets its deadline takes what the socket holds
// instead, without waiting. Likewise a runner may get the CPU back only
// after the write deadline that go-redis set just before writing: the
// write is made then, if the socket takes it at once, and the read
// deadline, which go-redis sets after the write, counts from there.
type dialHook struct{}

func (dialHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			return conn, err
		}
		return wrapLate(conn), nil
	}
}

func (dialHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (dialHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// pastDeadline keeps a connection's deadline expired, as it was, after a
// recovered read or write, so that a read of the rest of the reply takes
// only what has arrived too.
var pastDeadline = time.Unix(1, 0)
