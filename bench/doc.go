// Package bench holds tollgate's benchmarks, side by side with the rate
// limiters users would otherwise pick. It is a module of its own so that the
// libraries it compares against never reach tollgate's users.
package bench
