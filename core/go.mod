module github.com/tollgate-go/tollgate/core

go 1.25
