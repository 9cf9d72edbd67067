package dpdf_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/ppdf"
	"github.com/gprobes/gprobes/rpn"
)

// outcome is what compiling a DPDF gives: the PPDF bytes, or the errors
// as "gprobes check" prints them.
func outcome(t *testing.T, m *rpn.Module, err error) string {
	t.Helper()
	if err != nil {
		var b strings.Builder
		dpdf.PrintError(&b, err, true)
		return "errors:\n" + b.String()
	}
	data, err := ppdf.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	return "module:\n" + string(data)
}

// viaTree compiles path as a whole tree (dpdf.Parse, compiler.Compile).
func viaTree(t *testing.T, path string) string {
	f, err := dpdf.Parse(path, dpdf.Options{})
	if f == nil {
		return outcome(t, nil, err)
	}
	m, err := compiler.Compile(f, rpn.CompileOptions{})
	return outcome(t, m, err)
}

// viaReader compiles path a statement at a time (dpdf.Open,
// compiler.CompileReader), as gprobes does.
func viaReader(t *testing.T, path string) string {
	r, err := dpdf.Open(path, dpdf.Options{})
	if err != nil {
		return outcome(t, nil, err)
	}
	p, err := compiler.CompileReader(r, rpn.CompileOptions{})
	if err != nil {
		return outcome(t, nil, err)
	}
	return outcome(t, p.Module(), nil)
}

// Reading a DPDF in batches of statements changes nothing: every DPDF of
// the tree (examples, the compiler's error cases, the test programs),
// read in batches of 1, 2, 3 and 7 statements and in the default size,
// compiles to the same bytes, or to the same errors with the same source
// lines and carets, as the whole file parsed at once; and the parsed
// File is the same whatever the batch size.
func TestBatchesChangeNothing(t *testing.T) {
	var files []string
	for _, dir := range []string{"../testdata", "../rpn/testdata"} {
		filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, ".dpdf") {
				files = append(files, path)
			}
			return nil
		})
	}
	if len(files) < 20 {
		t.Fatalf("only %d DPDF files found", len(files))
	}
	// the preprocessor's collapsed blanks, several statements on a line
	// and a macro that expands to several: the column of each is found
	// again in the original line across batch boundaries
	dir := t.TempDir()
	cppFile := filepath.Join(dir, "cpp.dpdf")
	os.WriteFile(cppFile, []byte("#define TWO push d,1 ; push d,  2\nname = a.out\nmodtype = user\noffset = main\nTWO ;   add ;  pop r,rxx\npush   d,1 ; push r,rdi ;   jz nowhere\nexit 0\n"), 0o644)
	if _, err := dpdf.Parse(cppFile, dpdf.Options{}); err != nil && strings.Contains(err.Error(), "no C preprocessor") {
		testkit.SkipOrFail(t, "%v", err)
	}
	files = append(files, cppFile)
	for _, path := range files {
		want := viaTree(t, path)
		whole, _ := dpdf.Parse(path, dpdf.Options{})
		for _, n := range []int{1, 2, 3, 7, 4096} {
			undo := dpdf.SetBatchStatements(n)
			if got := viaReader(t, path); got != want {
				t.Errorf("%s, batches of %d: read a statement at a time:\n%s\nwhole file:\n%s", path, n, got, want)
			}
			if got := viaTree(t, path); got != want {
				t.Errorf("%s, batches of %d: parsed in batches:\n%s\nwith the default batch:\n%s", path, n, got, want)
			}
			f, _ := dpdf.Parse(path, dpdf.Options{})
			if whole != nil && f != nil && (!reflect.DeepEqual(f.Probes, whole.Probes) || !reflect.DeepEqual(f.Header, whole.Header)) {
				t.Errorf("%s, batches of %d: the parsed tree differs", path, n)
			}
			undo()
		}
	}
	undo := dpdf.SetBatchStatements(1)
	defer undo()
	got := viaReader(t, cppFile)
	for _, want := range []string{"cpp.dpdf:5:", "unknown register \"rxx\"", "cpp.dpdf:6:32: undefined label nowhere"} {
		if !strings.Contains(got, want) {
			t.Errorf("the preprocessed file's errors lack %q:\n%s", want, got)
		}
	}
}
