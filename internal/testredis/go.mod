module github.com/tollgate-go/tollgate/internal/testredis

go 1.25
