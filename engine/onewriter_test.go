package engine_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// What the engine plants in a target is written by one file: int3s,
// jumps to pads and debug registers go in and out through breakpoints.go
// only, so that fork, exec, exit and detach have one book to visit.
func TestOneWriter(t *testing.T) {
	writes := map[string]bool{"InsertBreakpoint": true, "RemoveBreakpoint": true, "Patch": true, "Unpatch": true, "SetWatch": true, "ClearWatch": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	seen := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !writes[sel.Sel.Name] {
				return true
			}
			seen++
			if f != "breakpoints.go" {
				t.Errorf("%s: %s called outside breakpoints.go", fset.Position(call.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
	if seen < len(writes) {
		t.Errorf("%d calls of the target's writes found, want each of %d at least once: the scan finds nothing", seen, len(writes))
	}
}
