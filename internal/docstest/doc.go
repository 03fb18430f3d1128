// Package docstest checks that the Go snippets of the repository's
// documentation compile against the code as it is: see docs_test.go.
package docstest
