package testkit

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	// holds at the third check: nil, and no more checks
	var n atomic.Int32
	if err := Until(time.Minute, "three", func() (bool, string) { return n.Add(1) == 3, "" }); err != nil || n.Load() != 3 {
		t.Errorf("after %d checks: %v", n.Load(), err)
	}
	// never holds: the error names what, the time and the last thing seen
	n.Store(0)
	err := Until(30*time.Millisecond, "the answer", func() (bool, string) {
		return false, "seen " + string(rune('0'+n.Add(1)%10))
	})
	if err == nil || !strings.HasPrefix(err.Error(), "the answer: not after ") || !strings.Contains(err.Error(), "checks); last seen: seen ") {
		t.Fatalf("error %v", err)
	}
	if last := "seen " + string(rune('0'+n.Load()%10)); !strings.HasSuffix(err.Error(), last) {
		t.Errorf("error %q does not end with the last check's %q", err, last)
	}
	// several lines seen: on lines of their own
	err = Until(0, "lines", func() (bool, string) { return false, "a\nb\n" })
	if err == nil || !strings.HasSuffix(err.Error(), "(1 checks); last seen:\na\nb") {
		t.Errorf("error %q", err)
	}
	var f fakeT
	Wait(&f, 0, "nothing", func() (bool, string) { return false, "" })
	if !strings.HasPrefix(f.failed, "nothing: not after ") {
		t.Errorf("Wait failed the test with %q", f.failed)
	}
	f = fakeT{}
	WaitTrue(&f, time.Minute, "true", func() bool { return true })
	if f.failed != "" {
		t.Errorf("WaitTrue failed with %q", f.failed)
	}
}
