module github.com/tollgate-go/tollgate/chi

go 1.25

require (
	github.com/go-chi/chi/v5 v5.5.0
	github.com/tollgate-go/tollgate/core v0.0.0
)

require github.com/dunglas/httpsfv v1.1.2

replace github.com/tollgate-go/tollgate/core => ../core
