package tollgategrpc

import (
	"context"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adapterkit"
)

// errInternal refuses the calls that a configuration error keeps from
// being decided; the error itself is logged, never sent.
var errInternal = status.Error(codes.Internal, adapterkit.InternalErrorBody.Message)

// statusOf returns the status error that refuses a call as a says: the gRPC
// counterpart of the HTTP status and body.
func statusOf(a *adapterkit.Answer) error {
	switch a.Body.Error {
	case adapterkit.CodeRateLimited:
		st := status.New(codes.ResourceExhausted, a.Body.Message)
		// RetryAfter is Retry-After's whole seconds, so that clients of
		// either protocol wait the same.
		retry := &errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(a.Body.RetryAfter) * time.Second)}
		if withDetails, err := st.WithDetails(retry, quotaFailure(&a.Decision)); err == nil {
			st = withDetails
		}
		return st.Err()
	case adapterkit.CodeUnavailable:
		return status.Error(codes.Unavailable, a.Body.Message)
	case adapterkit.CodeMissingTenant:
		return status.Error(codes.Unauthenticated, a.Body.Message)
	case adapterkit.CodeInvalidTenant:
		return status.Error(codes.InvalidArgument, a.Body.Message)
	}
	return errInternal
}

// quotaFailure names the policies that denied d, as the HTTP answer's
// violated-policies does: each with its capacity and its unit, the
// draft's quota unit. The subject is the caller's tenant, not named: its
// ID is the service's to show.
func quotaFailure(d *tollgate.Decision) *errdetails.QuotaFailure {
	qf := &errdetails.QuotaFailure{}
	policies, results := d.Policies(), d.Results()
	for i := range results {
		if results[i].Allowed || i >= len(policies) {
			continue
		}
		p := &policies[i]
		v := &errdetails.QuotaFailure_Violation{Subject: "tenant", QuotaId: p.Name, QuotaMetric: "requests"}
		switch {
		case p.InFlight > 0:
			v.QuotaMetric, v.QuotaValue = adapterkit.UnitConcurrentRequests, p.InFlight
			v.Description = "too many requests in flight: " + p.Name + " allows " + strconv.FormatInt(p.InFlight, 10) + " at once"
		case !p.Quota.IsZero():
			v.QuotaValue = p.Quota.Tokens
			v.Description = "quota exhausted: " + p.Name + " allows " + strconv.FormatInt(p.Quota.Tokens, 10) + " tokens a period"
		default:
			v.QuotaValue = p.Limit.Burst
			v.Description = "rate limit exceeded: " + p.Name + " allows a burst of " + strconv.FormatInt(p.Limit.Burst, 10) + " tokens"
		}
		qf.Violations = append(qf.Violations, v)
	}
	return qf
}

// The metadata keys of the rate-limit fields: the HTTP header names,
// lower-cased, as HTTP/2 and gRPC metadata want them.
var (
	keyLimit     = strings.ToLower(adapterkit.HeaderLimit)
	keyRemaining = strings.ToLower(adapterkit.HeaderRemaining)
	keyReset     = strings.ToLower(adapterkit.HeaderReset)
	keyPolicy    = strings.ToLower(adapterkit.HeaderPolicy)
	keyRateLimit = strings.ToLower(adapterkit.HeaderRateLimit)
	keyRetry     = strings.ToLower(adapterkit.HeaderRetry)
	keyTenant    = strings.ToLower(adapterkit.TenantHeader)
)

// metadataKey returns the metadata key of the HTTP header name, without
// allocating for the names tollgate uses.
func metadataKey(name string) string {
	switch name {
	case adapterkit.HeaderLimit:
		return keyLimit
	case adapterkit.HeaderRemaining:
		return keyRemaining
	case adapterkit.HeaderReset:
		return keyReset
	case adapterkit.HeaderPolicy:
		return keyPolicy
	case adapterkit.HeaderRateLimit:
		return keyRateLimit
	case adapterkit.HeaderRetry:
		return keyRetry
	case adapterkit.TenantHeader:
		return keyTenant
	}
	return strings.ToLower(name)
}

// metadataFields collects the rate-limit fields of a decision as header
// metadata, under the HTTP header names lower-cased and with their values;
// md stays nil for a decision without figures.
type metadataFields struct {
	md   metadata.MD
	vals *[6]string // every value, rather than one slice each
	n    int
}

func (f *metadataFields) set(name, value string) {
	if f.md == nil {
		f.md, f.vals = make(metadata.MD, 6), new([6]string)
	}
	if f.n < len(f.vals) {
		f.vals[f.n] = value
		f.md[metadataKey(name)] = f.vals[f.n : f.n+1 : f.n+1]
		f.n++
	}
}

// metadataValue returns the first value of the incoming metadata key, which
// must be lower-case, or "".
func metadataValue(ctx context.Context, key string) string {
	if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}
