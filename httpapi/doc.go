// Package httpapi is studio's HTTP interface: a chi router with bearer-token
// authentication, strict JSON in and out, one error path that turns domain
// error codes into RFC 9457 problem documents, cursor-paged lists, asset
// downloads, the operational endpoints and the OpenAPI document that
// describes all of them.
//
// The package holds no business rules. A POST is decoded and validated by
// the intent package, run by the intent service and answered here; reads go
// straight to the store, always scoped to the caller's actor, so another
// actor's record answers 404 exactly like a missing one.
//
// Adding a route is one line in (*Server).routes plus its entry in
// openapi.json; TestOpenAPICoversRoutes fails until both agree.
package httpapi
