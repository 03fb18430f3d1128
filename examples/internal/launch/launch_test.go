package launch

import (
	"slices"
	"testing"
)

func TestOutputSplitsLines(t *testing.T) {
	o := newOutput()
	_, changed := o.linesFrom(0)
	o.Write([]byte(`{"msg":"a"}` + "\n" + `{"msg":`))
	select {
	case <-changed:
	default:
		t.Fatal("a complete line did not wake the waiters")
	}
	o.Write([]byte(`"b"}` + "\nplain text\n"))
	lines, _ := o.linesFrom(1)
	if want := []string{`{"msg":"b"}`, "plain text"}; !slices.Equal(lines, want) {
		t.Errorf("lines from 1: %q, want %q", lines, want)
	}
	if lines, _ := o.linesFrom(10); len(lines) != 0 {
		t.Errorf("lines past the end: %q", lines)
	}
	if got := o.String(); got != `{"msg":"a"}`+"\n"+`{"msg":"b"}`+"\nplain text\n" {
		t.Errorf("String() = %q", got)
	}
}
