package tollgategrpc

import (
	"context"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/tollgatehttp"
)

// errInternal refuses the calls that a configuration error keeps from
// being decided; the error itself is logged, never sent.
var errInternal = status.Error(codes.Internal, tollgatehttp.InternalErrorBody.Message)

// statusOf returns the status error that refuses a call as a says: the gRPC
// counterpart of the HTTP status and body.
func statusOf(a *tollgatehttp.Answer) error {
	switch a.Body.Error {
	case tollgatehttp.CodeRateLimited:
		st := status.New(codes.ResourceExhausted, a.Body.Message)
		// RetryAfter is Retry-After's whole seconds, so that clients of
		// either protocol wait the same.
		retry := &errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(a.Body.RetryAfter) * time.Second)}
		if withRetry, err := st.WithDetails(retry); err == nil {
			st = withRetry
		}
		return st.Err()
	case tollgatehttp.CodeUnavailable:
		return status.Error(codes.Unavailable, a.Body.Message)
	case tollgatehttp.CodeMissingTenant:
		return status.Error(codes.Unauthenticated, a.Body.Message)
	case tollgatehttp.CodeInvalidTenant:
		return status.Error(codes.InvalidArgument, a.Body.Message)
	}
	return errInternal
}

// The metadata keys of the rate-limit fields: the HTTP header names,
// lower-cased, as HTTP/2 and gRPC metadata want them.
var (
	keyLimit     = strings.ToLower(tollgatehttp.HeaderLimit)
	keyRemaining = strings.ToLower(tollgatehttp.HeaderRemaining)
	keyReset     = strings.ToLower(tollgatehttp.HeaderReset)
	keyPolicy    = strings.ToLower(tollgatehttp.HeaderPolicy)
	keyRateLimit = strings.ToLower(tollgatehttp.HeaderRateLimit)
	keyRetry     = strings.ToLower(tollgatehttp.HeaderRetry)
	keyTenant    = strings.ToLower(tollgatehttp.DefaultTenantHeader)
)

// metadataKey returns the metadata key of the HTTP header name, without
// allocating for the names tollgate uses.
func metadataKey(name string) string {
	switch name {
	case tollgatehttp.HeaderLimit:
		return keyLimit
	case tollgatehttp.HeaderRemaining:
		return keyRemaining
	case tollgatehttp.HeaderReset:
		return keyReset
	case tollgatehttp.HeaderPolicy:
		return keyPolicy
	case tollgatehttp.HeaderRateLimit:
		return keyRateLimit
	case tollgatehttp.HeaderRetry:
		return keyRetry
	case tollgatehttp.DefaultTenantHeader:
		return keyTenant
	}
	return strings.ToLower(name)
}

// headerMetadata returns d's rate-limit fields as header metadata, with the
// values of tollgatehttp's headers, or nil when d has no figures.
func headerMetadata(d *tollgate.Decision) metadata.MD {
	if !d.HasFigures() {
		return nil
	}
	md := make(metadata.MD, 6)
	// One array holds every value, rather than one slice each.
	vals := new([6]string)
	n := 0
	tollgatehttp.VisitHeaders(d, func(name, value string) {
		if n < len(vals) {
			vals[n] = value
			md[metadataKey(name)] = vals[n : n+1 : n+1]
			n++
		}
	})
	return md
}

// metadataValue returns the first value of the incoming metadata key, which
// must be lower-case, or "".
func metadataValue(ctx context.Context, key string) string {
	if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}
