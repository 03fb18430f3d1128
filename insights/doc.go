// Package insights finds a service's upgrade candidates: the tenants that
// keep hitting their rate limits. A Tracker observes every decision of a
// tollgate.Limiter (tollgate.WithObserver), keeps a bounded summary of the
// most throttled tenants per time bucket, and reports them over the last
// hour, day or week, with their plan, the share of their requests that was
// throttled, their peak demand, their routes and the smallest plan that
// would have served that peak. Tracker.Handler serves the report as an HTML
// page and as JSON, for the application to mount behind its own
// authentication.
//
// With several replicas, an Exchange (Redis: see the redisexchange
// package) lets every replica report the same fleet-wide candidates.
//
//	plans := tollgate.DefaultPlans()
//	tracker, err := insights.New(insights.WithPlans(plans))
//	limiter, err := tollgate.New(store, resolver, tollgate.WithObserver(tracker))
//	admin.Handle("/admin/tollgate", requireAdmin(tracker.Handler()))
package insights
