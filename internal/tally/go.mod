module github.com/tollgate-go/tollgate/internal/tally

go 1.26.0

require github.com/tollgate-go/tollgate/core v0.0.0

replace github.com/tollgate-go/tollgate/core => ../../core
