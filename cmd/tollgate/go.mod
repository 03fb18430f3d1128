module github.com/tollgate-go/tollgate/cmd/tollgate

go 1.26.0
