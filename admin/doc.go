// Package admin serves the operator's side of tollgate: a page that a
// browser opens and a JSON API that scripts and the tollgate CLI call, to
// see who is throttled, inspect a tenant, reset it, and set or clear an
// override of its limits, on every replica that shares the Limiter's store.
//
// The handler serves, relative to where the application mounts it:
//
//	GET    /                            the page; JSON with ?format=json
//	POST   /                            the page's forms
//	GET    /api/tenants/{tenant}        the tenant's plan, override and figures
//	PUT    /api/tenants/{tenant}/override
//	DELETE /api/tenants/{tenant}/override?reason=...
//	POST   /api/tenants/{tenant}/reset
//	GET    /api/overrides               the overrides in force
//	GET    /api/changes                 the latest changes, newest first
//	GET    /api/candidates?window=24h&n=20
//
// Every request needs one of the labelled tokens of Config.Tokens, as
// "Authorization: Bearer <token>" or as the password of HTTP Basic (any user
// name), which is how a browser logs in. A change made with Basic
// credentials also needs the page's anti-forgery token (the page's forms
// carry it), so that another site can not make the browser change limits.
//
// Mount it with http.StripPrefix, as the example applications do:
//
//	h, err := admin.New(admin.Config{
//		Limiter: limiter,
//		Tracker: tracker,
//		Tokens:  map[string]string{"admin": os.Getenv("ADMIN_TOKEN")},
//	})
//	mux.Handle("/admin/tollgate", http.StripPrefix("/admin/tollgate", h))
//	mux.Handle("/admin/tollgate/", http.StripPrefix("/admin/tollgate", h))
package admin
