package symbols

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gprobes/gprobes/internal/testkit"
)

// The fixtures are C programs under testdata/src, built with gcc once per
// run of the test binary into a temporary directory that TestMain removes.
// Without gcc the tests that need them skip, unless CI=true, where a missing
// tool fails the test.

type fixtures struct {
	dir     string
	prog    string   // PIE, -g (DWARF 5), sources compiled by relative path
	nopie   string   // -no-pie, -gdwarf-4, sources compiled by absolute path
	zlib    string   // -gz=zlib: SHF_COMPRESSED debug sections
	zdebug  string   // -gz=zlib-gnu: .zdebug_* sections; "" when the toolchain cannot
	skipped []string // optional builds the toolchain refused
	typesec string   // -gdwarf-4 -fdebug-types-section: types in .debug_types
	split   string   // -gsplit-dwarf: types in .dwo files
	strip   string   // libfix.so stripped: .dynsym only, no DWARF
	lib     string   // shared library with versioned symbols
	obj     string   // other.o: ET_REL
	sysmap  string   // nm -n prog
	layout  string   // output of the layout program: the sizeof/offsetof oracle
	src     string   // copy of testdata/src in dir
	markers map[string]markerLine
}

// markerLine is a line of a fixture source tagged "L:name".
type markerLine struct {
	file string // path relative to src
	line int
}

var fix struct {
	once sync.Once
	f    *fixtures
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fix.f != nil {
		os.RemoveAll(fix.f.dir)
	}
	os.Exit(code)
}

// needFixtures builds the fixture programs once.
func needFixtures(t testing.TB) *fixtures {
	t.Helper()
	testkit.Need(t, "gcc", "nm", "strip")
	fix.once.Do(func() { fix.f, fix.err = buildFixtures() })
	if fix.err != nil {
		t.Fatal(fix.err)
	}
	return fix.f
}

func buildFixtures() (*fixtures, error) {
	dir, err := os.MkdirTemp("", "symbols-fixtures-")
	if err != nil {
		return nil, err
	}
	f := &fixtures{dir: dir, src: filepath.Join(dir, "src")}
	if err := os.CopyFS(f.src, os.DirFS("testdata/src")); err != nil {
		return f, err
	}
	out := func(name string) string { return filepath.Join(dir, name) }
	f.prog, f.nopie, f.zlib, f.zdebug = out("prog"), out("prog-nopie"), out("prog-zlib"), out("prog-zdebug")
	f.strip, f.lib, f.obj, f.sysmap = out("libfix-stripped.so"), out("libfix.so"), out("other.o"), out("System.map")
	f.typesec, f.split = out("prog-types"), out("prog-split")
	srcs := []string{"main.c", "other.c", "fs/open.c", "xfs/open.c"}
	abs := make([]string, len(srcs))
	for i, s := range srcs {
		abs[i] = filepath.Join(f.src, s)
	}
	steps := [][]string{
		append([]string{"gcc", "-g", "-O0", "-fPIE", "-pie", "-o", f.prog}, srcs...),
		append([]string{"gcc", "-gdwarf-4", "-O0", "-fno-pie", "-no-pie", "-o", f.nopie}, abs...),
		append([]string{"gcc", "-g", "-gz=zlib", "-O0", "-o", f.zlib}, srcs...),
		append([]string{"gcc", "-gdwarf-4", "-fdebug-types-section", "-O0", "-o", f.typesec}, srcs...),
		append([]string{"gcc", "-g", "-gsplit-dwarf", "-O0", "-o", f.split}, srcs...),
		{"gcc", "-g", "-O0", "-fPIC", "-shared", "-Wl,--version-script=lib.map", "-o", f.lib, "lib.c"},
		{"gcc", "-g", "-O0", "-c", "-o", f.obj, "other.c"},
		{"gcc", "-O0", "-o", out("layout"), "layout.c"},
		{"strip", "--strip-all", "-o", f.strip, f.lib},
	}
	for _, s := range steps {
		cmd := exec.Command(s[0], s[1:]...)
		cmd.Dir = f.src
		if b, err := cmd.CombinedOutput(); err != nil {
			return f, fmt.Errorf("%s: %v\n%s", strings.Join(s, " "), err, b)
		}
	}
	// Newer binutils may have dropped the GNU .zdebug format: optional.
	cmd := exec.Command("gcc", append([]string{"-g", "-gz=zlib-gnu", "-O0", "-o", f.zdebug}, srcs...)...)
	cmd.Dir = f.src
	if b, err := cmd.CombinedOutput(); err != nil {
		f.skipped = append(f.skipped, fmt.Sprintf("gcc -gz=zlib-gnu: %v: %s", err, b))
		f.zdebug = ""
	}
	b, err := exec.Command("nm", "-n", f.prog).Output()
	if err != nil {
		return f, fmt.Errorf("nm -n %s: %v", f.prog, err)
	}
	if err := os.WriteFile(f.sysmap, b, 0o644); err != nil {
		return f, err
	}
	b, err = exec.Command(out("layout")).Output()
	if err != nil {
		return f, fmt.Errorf("run layout: %v", err)
	}
	f.layout = string(b)
	f.markers, err = findMarkers(f.src, append(srcs, "fixture.h"))
	return f, err
}

// findMarkers returns the lines tagged "L:name" in the fixture sources.
func findMarkers(dir string, files []string) (map[string]markerLine, error) {
	m := map[string]markerLine{}
	for _, name := range files {
		fh, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(fh)
		for n := 1; sc.Scan(); n++ {
			if _, tag, ok := strings.Cut(sc.Text(), "L:"); ok {
				tag, _, _ = strings.Cut(tag, " ")
				tag = strings.TrimRight(tag, ":*/")
				m[tag] = markerLine{name, n}
			}
		}
		fh.Close()
	}
	return m, nil
}

// builds returns the non-empty paths, logging the optional builds that the
// toolchain refused.
func (f *fixtures) builds(t testing.TB, paths ...string) []string {
	t.Helper()
	for _, s := range f.skipped {
		t.Logf("optional fixture not built: %s", s)
	}
	var out []string
	for _, p := range paths {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// marker returns a tagged line, failing the test when it is missing.
func (f *fixtures) marker(t testing.TB, name string) markerLine {
	t.Helper()
	m, ok := f.markers[name]
	if !ok {
		t.Fatalf("no L:%s marker in testdata/src", name)
	}
	return m
}

// open opens a fixture file, failing the test on error.
func mustOpen(t testing.TB, path string) *Table {
	t.Helper()
	tb, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// run runs a command and returns its standard output, failing the test on
// error.
func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	b, err := exec.Command(name, args...).Output()
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return string(b)
}
