//go:build linux

package ptrace_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/engine"
)

// goFixture builds testdata/retprobe/gowork, a Go program, with the go
// command of the test.
func goFixture(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gowork")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = "../testdata/retprobe/gowork"
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// Go code stays on the int3 route (a pad's state does not fit a goroutine's
// stack), however the Go toolchain names its runtime: since Go 1.17 the
// stack-growth entry is runtime.morestack.abi0, and a check for
// runtime.morestack alone put a pad into main.work, which killed the
// program with "split stack overflow".
func TestJumpNotInGo(t *testing.T) {
	bin := goFixture(t)
	r := startWith(t, startConfig{path: bin, route: engine.RouteAuto}, "flat", "4", "100")
	infos := r.insert(compileFor(t, bin, "name = PROGRAM\nmodtype = user\noffset = main.work\npush r,rax\nlog 1\nexit 1\n"))
	if p := infos[0]; p.State != engine.StateActive || !strings.Contains(p.How, "Go code") {
		t.Fatalf("probe: %s, HOW %q: want the int3 route, for Go code", p.State, p.How)
	}
	r.eng.Release()
	lines := r.finish()
	if !strings.HasPrefix(lines[len(lines)-1], "done calls 400 ") {
		t.Fatalf("fixture: %q", lines)
	}
	// a call whose prologue finds the stack too small runs the first
	// instruction again after runtime.morestack: at least one record a
	// call
	if n := len(r.records(0)); n < 400 {
		t.Errorf("%d records, want at least 400", n)
	}
}
