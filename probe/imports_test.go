package probe_test

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/internal/testkit"
)

const mod = "github.com/gprobes/gprobes/"

// deps lists the packages of this module that pkg links, for goos (go
// list -deps: every package it imports, directly or not).
func deps(t *testing.T, goos, pkg string) []string {
	t.Helper()
	cmd := exec.Command(testkit.Tool(t, "go"), "list", "-deps", "-f", "{{.ImportPath}}", mod+pkg)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH=amd64", "CGO_ENABLED=0")
	if goos == "darwin" {
		cmd.Env = append(cmd.Env, "GOARCH=arm64")
	}
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list -deps %s (GOOS=%s): %v\n%s", pkg, goos, err, stderr)
	}
	var own []string
	for _, p := range strings.Fields(string(out)) {
		if rest, ok := strings.CutPrefix(p, mod); ok {
			own = append(own, rest)
		}
	}
	return own
}

// TestImportGraph keeps the probe contract below every mechanism: what
// writes records and the eBPF kernel target link neither the stop-based
// engine nor what it is made of (the x86 decoder, the JIT, the pad
// builder), and package probe links nothing but rpn and symbols (and
// what they link).
func TestImportGraph(t *testing.T) {
	for _, goos := range []string{"linux", "darwin"} {
		engine := []string{"engine", "engine/x86", "engine/entries", "jit", "pad", "ptrace"}
		for _, pkg := range []string{"kernel", "timeline", "ctf", "perfetto", "internal/tracecheck", "hist"} {
			for _, d := range deps(t, goos, pkg) {
				if slices.Contains(engine, d) {
					t.Errorf("GOOS=%s: %s links %s: a record writer or the kernel target needs package probe only", goos, pkg, d)
				}
			}
		}
		allowed := map[string]bool{"probe": true}
		for _, below := range []string{"rpn", "symbols"} {
			for _, d := range deps(t, goos, below) {
				allowed[d] = true
			}
		}
		got := deps(t, goos, "probe")
		for _, d := range got {
			if !allowed[d] {
				t.Errorf("GOOS=%s: probe links %s; it may link rpn, symbols and what they link only", goos, d)
			}
		}
		if !slices.Contains(got, "rpn") || !slices.Contains(got, "symbols") {
			t.Errorf("GOOS=%s: probe links %v: the test no longer sees what it is about", goos, got)
		}
	}
}
