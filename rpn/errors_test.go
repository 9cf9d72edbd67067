package rpn_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/rpn"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestErrorsGolden compiles every testdata/errors/*.dpdf and compares the
// errors, printed as "gprobes check" prints them (with source lines and
// carets), with the .err file beside it. Run with -update to rewrite them.
func TestErrorsGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/errors/*.dpdf")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files: %v", err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f, err := dpdf.Parse(path, dpdf.Options{})
			if f != nil {
				_, err = compiler.Compile(f, rpn.CompileOptions{})
			}
			if err == nil {
				t.Fatal("compiled without errors")
			}
			var b strings.Builder
			dpdf.PrintError(&b, err, true)
			got := b.String()
			golden := strings.TrimSuffix(path, ".dpdf") + ".err"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("errors differ from %s:\n--- got\n%s--- want\n%s", golden, got, want)
			}
			// every error names the file, a line and a column
			for _, l := range strings.Split(strings.TrimSpace(got), "\n") {
				if strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t") {
					continue
				}
				if !strings.HasPrefix(l, path+":") {
					t.Errorf("error without file:line:col: %q", l)
				}
			}
		})
	}
}
