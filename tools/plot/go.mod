module github.com/tollgate-go/tollgate/tools/plot

go 1.25

require github.com/tollgate-go/tollgate/core v0.0.0

replace github.com/tollgate-go/tollgate/core => ../../core
