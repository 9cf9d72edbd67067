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

// graph is what one package of this module links, for one GOOS: every
// package of the module it imports, directly or not (go list -deps), and
// the imports of each, within the module.
type graph struct {
	root    string
	imports map[string][]string
	order   []string // go list's order: dependencies first
}

// deps reads pkg's graph for goos (GOARCH amd64, darwin's arm64).
func deps(t *testing.T, goos, pkg string) *graph {
	t.Helper()
	cmd := exec.Command(testkit.Tool(t, "go"), "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", mod+pkg)
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
	g := &graph{root: pkg, imports: map[string][]string{}}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		p, ok := strings.CutPrefix(f[0], mod)
		if !ok {
			continue
		}
		g.order = append(g.order, p)
		for _, imp := range f[1:] {
			if rest, ok := strings.CutPrefix(imp, mod); ok {
				g.imports[p] = append(g.imports[p], rest)
			}
		}
	}
	return g
}

// has reports whether the graph links p (the root included).
func (g *graph) has(p string) bool { return slices.Contains(g.order, p) }

// path is a shortest chain of imports from the root to p, "root -> ... ->
// p", or "" when the root does not link p.
func (g *graph) path(p string) string {
	prev := map[string]string{g.root: ""}
	queue := []string{g.root}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == p {
			chain := []string{p}
			for at := prev[p]; at != ""; at = prev[at] {
				chain = append(chain, at)
			}
			slices.Reverse(chain)
			return strings.Join(chain, " -> ")
		}
		for _, next := range g.imports[cur] {
			if _, seen := prev[next]; !seen {
				prev[next] = cur
				queue = append(queue, next)
			}
		}
	}
	return ""
}

// TestImportGraph keeps the probe contract below every mechanism: what
// writes records and the eBPF kernel target link neither the stop-based
// engine nor what it is made of (the x86 decoder, the JIT, the pad
// builder, ptrace), package probe links nothing but rpn and symbols (and
// what they link), and the bytecode (rpn) and the eBPF compiler (bpf)
// link neither the DPDF parser nor the DPDF compiler above them. A failure
// names the chain of imports that brings the package in.
func TestImportGraph(t *testing.T) {
	for _, goos := range []string{"linux", "darwin"} {
		engine := []string{"engine", "x86", "engine/entries", "jit", "pad", "ptrace"}
		for _, pkg := range []string{"kernel", "timeline", "ctf", "perfetto", "internal/tracecheck", "hist"} {
			g := deps(t, goos, pkg)
			if !g.has(pkg) {
				t.Fatalf("GOOS=%s: go list -deps %s does not list %s itself: the test no longer sees what it is about", goos, pkg, pkg)
			}
			for _, d := range g.order {
				if slices.Contains(engine, d) {
					t.Errorf("GOOS=%s: %s links %s (%s): a record writer or the kernel target needs package probe only", goos, pkg, d, g.path(d))
				}
			}
		}
		for _, pkg := range []string{"rpn", "bpf"} {
			g := deps(t, goos, pkg)
			if !g.has(pkg) {
				t.Fatalf("GOOS=%s: go list -deps %s does not list %s itself: the test no longer sees what it is about", goos, pkg, pkg)
			}
			for _, above := range []string{"dpdf", "compiler"} {
				if g.has(above) {
					t.Errorf("GOOS=%s: %s links %s (%s): the bytecode and what runs it sit below the DPDF language", goos, pkg, above, g.path(above))
				}
			}
		}
		// the pad builder sits below the engine: it links the x86
		// decoder, the JIT and the bytecode, nothing under engine/
		pg := deps(t, goos, "pad")
		if !pg.has("x86") {
			t.Errorf("GOOS=%s: pad links %v: the test no longer sees what it is about", goos, pg.order)
		}
		for _, d := range pg.order {
			if d == "engine" || strings.HasPrefix(d, "engine/") {
				t.Errorf("GOOS=%s: pad links %s (%s): the pads sit below the engine", goos, d, pg.path(d))
			}
		}
		allowed := map[string]bool{"probe": true}
		for _, below := range []string{"rpn", "symbols"} {
			for _, d := range deps(t, goos, below).order {
				allowed[d] = true
			}
		}
		g := deps(t, goos, "probe")
		for _, d := range g.order {
			if !allowed[d] {
				t.Errorf("GOOS=%s: probe links %s (%s); it may link rpn, symbols and what they link only", goos, d, g.path(d))
			}
		}
		if !g.has("rpn") || !g.has("symbols") {
			t.Errorf("GOOS=%s: probe links %v: the test no longer sees what it is about", goos, g.order)
		}
	}
}

// TestImportPath checks the chain a failure of TestImportGraph names, on
// a package known to link the engine: the daemon, through its targets.
func TestImportPath(t *testing.T) {
	g := deps(t, "linux", "daemon")
	p := g.path("engine")
	chain := strings.Split(p, " -> ")
	if len(chain) < 2 || chain[0] != "daemon" || chain[len(chain)-1] != "engine" {
		t.Fatalf("path daemon to engine: %q", p)
	}
	for i := 1; i < len(chain); i++ {
		if !slices.Contains(g.imports[chain[i-1]], chain[i]) {
			t.Errorf("path %q: %s does not import %s", p, chain[i-1], chain[i])
		}
	}
	if p := g.path("no/such/package"); p != "" {
		t.Errorf("path to a package not linked: %q", p)
	}
}
