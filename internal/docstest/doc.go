// Package docstest checks that the Go snippets of the repository's
// documentation compile against the code as it is (docs_test.go), and that
// its whole programs and the example apps build when copied alone into a
// module of their own (alone_test.go).
package docstest
