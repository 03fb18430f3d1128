package bench

import (
	"net/http"
	"syscall"
	"testing"
	"time"
)

// cpuTime returns the CPU time, user and system, that the process has used
// so far, all threads together (the garbage collector's too). Unlike wall
// time it hardly moves when other processes share the machine.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU stops b's timer and reports the CPU time used since start, per
// iteration, as cpu-ns/op.
func reportCPU(b *testing.B, start time.Duration) {
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

// discardWriter is a reusable http.ResponseWriter that keeps the status and
// headers and drops the body.
type discardWriter struct {
	header http.Header
	status int
}

func (w *discardWriter) Header() http.Header { return w.header }

func (w *discardWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *discardWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return len(p), nil
}
