module github.com/tollgate-go/tollgate/echov5

go 1.25.0

require (
	github.com/dunglas/httpsfv v1.1.2
	github.com/labstack/echo/v5 v5.4.4
	github.com/tollgate-go/tollgate/core v0.0.0
)

require golang.org/x/time v0.15.0 // indirect

replace github.com/tollgate-go/tollgate/core => ../core
