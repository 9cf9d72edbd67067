package testsum

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fixture is a module whose tests pass, fail, skip for a missing tool,
// skip with -short, and panic: the events are go test's own.
var fixture = map[string]string{
	"go.mod": "module example.com/fx\n\ngo 1.21\n",
	"a/a_test.go": `package a

import "testing"

func TestPass(t *testing.T) { t.Log("fine") }

func TestSkipTool(t *testing.T) { t.Skip("frobnicate is missing") }

func TestShort(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: boots a VM")
	}
}

func TestSub(t *testing.T) {
	t.Run("one", func(t *testing.T) {})
	t.Run("two", func(t *testing.T) { t.Skip("not here") })
}
`,
	"b/b_test.go": `package b

import "testing"

func TestOK(t *testing.T) {}

func TestBroken(t *testing.T) {
	t.Log("the context line")
	t.Errorf("got %d, want %d", 1, 2)
}
`,
	"c/c_test.go": `package c

import "testing"

func TestPanics(t *testing.T) { var m map[int]int; m[1] = 1 }
`,
	"d/d_test.go": `package d

import "testing"

func TestNoBuild(t *testing.T) { undefined() }
`,
	"e/e.go": "package e\n",
}

func goTestJSON(t *testing.T, args ...string) []byte {
	t.Helper()
	dir := t.TempDir()
	for name, text := range fixture {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if len(args) == 0 || strings.HasPrefix(args[len(args)-1], "-") {
		args = append(args, "./...")
	}
	cmd := exec.Command("go", append([]string{"test", "-json", "-count=1"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return out
}

func TestRunCountsAndReports(t *testing.T) {
	stream := goTestJSON(t)
	allow, err := ParseAllowlist(strings.NewReader("# comment\n\na TestSkipTool frobnicate is not packaged for Debian\n"))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	o := Options{CI: true, Allow: allow}
	res, err := Run(bytes.NewReader(stream), &out, o)
	if err != nil {
		t.Fatal(err)
	}
	report := out.String()
	t.Log(report)
	a := res.Packages["example.com/fx/a"]
	// TestPass, TestShort, TestSub, TestSub/one pass; TestSkipTool and TestSub/two skip
	if a != (Counts{Passed: 4, Skipped: 2}) {
		t.Errorf("package a: %+v", a)
	}
	if b := res.Packages["example.com/fx/b"]; b != (Counts{Passed: 1, Failed: 1}) {
		t.Errorf("package b: %+v", b)
	}
	if c := res.Packages["example.com/fx/c"]; c.Failed != 1 {
		t.Errorf("package c: %+v", c)
	}
	if res.Total != (Counts{Passed: 5, Failed: 2, Skipped: 2}) {
		t.Errorf("total %+v", res.Total)
	}
	if len(res.Unlisted) != 1 || res.Unlisted[0].Test != "TestSub/two" || !strings.HasSuffix(res.Unlisted[0].Reason, ": not here") {
		t.Errorf("unlisted skips %+v", res.Unlisted)
	}
	want := []string{
		"ok  \texample.com/fx/a\t",
		"run 4, skipped 2, failed 0",
		"skip (allowed) TestSkipTool: a_test.go:7: frobnicate is missing",
		"SKIP NOT ALLOWED TestSub/two: a_test.go:17: not here",
		// the failed test's whole output, as go test prints it
		"the context line",
		"got 1, want 2",
		"--- FAIL: TestBroken",
		"FAIL\texample.com/fx/b\t",
		"run 2, skipped 0, failed 1",
		// the panic and where
		"panic: assignment to entry in nil map",
		"c_test.go:5",
		"FAIL\texample.com/fx/c\t",
		// the build failure
		"undefined: undefined",
		"FAIL\texample.com/fx/d [build failed]",
		"CI=true: 1 skipped tests not in the allowlist",
		"failed packages: ",
		"\ntests: 5 passed, 2 failed, 2 skipped\n",
	}
	for _, w := range want {
		if !strings.Contains(report, w) {
			t.Errorf("the report lacks %q", w)
		}
	}
	if strings.Contains(report, "fx/e") {
		t.Errorf("a package without tests is reported")
	}
	if strings.Contains(report, "\"Action\"") {
		t.Errorf("raw JSON in the report")
	}
	if len(res.FailedPkgs) != 3 || res.OK(o) {
		t.Errorf("failed packages %v, OK %v", res.FailedPkgs, res.OK(o))
	}
}

func TestRunCIAndShort(t *testing.T) {
	stream := goTestJSON(t, "-short", "./a")
	for _, c := range []struct {
		name   string
		o      Options
		ok     bool
		skips  int
		unlist int
	}{
		{"developer", Options{}, true, 3, 3},
		{"CI, no allowlist", Options{CI: true}, false, 3, 3},
		// -short accepted only for a -short run
		{"CI, short", Options{CI: true, Short: true}, false, 3, 2},
		{"CI, short, all allowed", Options{CI: true, Short: true, Allow: []*Allow{
			{Package: "a", Test: "TestSkipTool", Reason: "r"}, {Package: "example.com/fx/a", Test: "TestSub/*", Reason: "r"}}}, true, 3, 0},
		// a suffix must be a whole path element
		{"CI, wrong package", Options{CI: true, Short: true, Allow: []*Allow{
			{Package: "x/a", Test: "*", Reason: "r"}, {Package: "fx/a/b", Test: "*", Reason: "r"}}}, false, 3, 2},
	} {
		var out bytes.Buffer
		res, err := Run(bytes.NewReader(stream), &out, c.o)
		if err != nil {
			t.Fatal(err)
		}
		if res.OK(c.o) != c.ok || len(res.Skips) != c.skips || len(res.Unlisted) != c.unlist {
			t.Errorf("%s: OK %v, %d skips, %d unlisted; want %v, %d, %d\n%s", c.name, res.OK(c.o), len(res.Skips), len(res.Unlisted), c.ok, c.skips, c.unlist, out.String())
		}
	}
}

func TestParseAllowlistErrors(t *testing.T) {
	for _, bad := range []string{"pkg TestX\n", "pkg [ reason\n"} {
		if _, err := ParseAllowlist(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// The repository's own allowlist parses, and every entry names a package
// of this module that has tests.
func TestRepositoryAllowlist(t *testing.T) {
	f, err := os.Open("../../../.ci/skips")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	list, err := ParseAllowlist(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range list {
		dir := filepath.Join("../../..", a.Package)
		tests, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
		if len(tests) == 0 {
			t.Errorf(".ci/skips line %d: %s has no tests", a.Line, a.Package)
		}
		if len(strings.Fields(a.Reason)) < 3 {
			t.Errorf(".ci/skips line %d: the reason %q says too little", a.Line, a.Reason)
		}
	}
}

func TestMainExitStatus(t *testing.T) {
	stream := goTestJSON(t, "./a")
	var out, errb bytes.Buffer
	t.Setenv("CI", "")
	if code := Main(nil, bytes.NewReader(stream), &out, &errb); code != 0 {
		t.Errorf("developer run: exit %d\n%s%s", code, out.String(), errb.String())
	}
	t.Setenv("CI", "true")
	out.Reset()
	if code := Main([]string{"-label", "race"}, bytes.NewReader(stream), &out, &errb); code != 1 {
		t.Errorf("CI run with unlisted skips: exit %d", code)
	}
	if !strings.Contains(out.String(), "\nrace: 4 passed, 0 failed, 2 skipped\n") {
		t.Errorf("closing line:\n%s", out.String())
	}
	if code := Main([]string{"-bogus"}, nil, &out, &errb); code != 2 {
		t.Errorf("bad argument: exit %d", code)
	}
}

// TestSlowest: the report names the slowest top-level tests, slowest
// first, from go test's own Elapsed, subtests left out, before the
// closing line (which scripts/test prints last).
func TestSlowest(t *testing.T) {
	ev := func(pkg, test, action string, el float64) string {
		return `{"Action":"` + action + `","Package":"` + pkg + `","Test":"` + test + `","Elapsed":` + strconv.FormatFloat(el, 'f', -1, 64) + "}\n"
	}
	in := ev("p/a", "TestFast", "pass", 0.5) + ev("p/a", "TestSlow", "fail", 30) +
		ev("p/a", "TestSlow/sub", "pass", 29) + ev("p/b", "TestMid", "pass", 7.25) +
		ev("p/b", "TestSkipped", "skip", 90) +
		`{"Action":"fail","Package":"p/a","Elapsed":31}` + "\n" + `{"Action":"pass","Package":"p/b","Elapsed":8}` + "\n"
	var out bytes.Buffer
	res, err := Run(strings.NewReader(in), &out, Options{Slowest: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := []Timed{{"p/a", "TestSlow", 30}, {"p/b", "TestMid", 7.25}}
	if len(res.Slowest) != 2 || res.Slowest[0] != want[0] || res.Slowest[1] != want[1] {
		t.Errorf("slowest %+v, want %+v", res.Slowest, want)
	}
	s := out.String()
	i := strings.Index(s, "the 2 slowest tests:\n       30.0s  p/a TestSlow\n        7.2s  p/b TestMid\n")
	if i < 0 || !strings.HasSuffix(strings.TrimSpace(s), "tests: 3 passed, 1 failed, 1 skipped") {
		t.Errorf("report:\n%s", s)
	}
	out.Reset()
	if res, _ := Run(strings.NewReader(in), &out, Options{}); len(res.Slowest) != 0 || strings.Contains(out.String(), "slowest") {
		t.Errorf("without Slowest the report names none:\n%s", out.String())
	}
}

// Two streams read at once (the lab packages and the others, side by
// side) are one run: every package, the failures in full, the skips and a
// closing count of the whole.
func TestMainMergesStreams(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	if err := os.WriteFile(a, goTestJSON(t, "./a"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, goTestJSON(t, "./b"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	t.Setenv("CI", "")
	if code := Main([]string{"-slowest", "3", a, b}, nil, &out, &errb); code != 1 {
		t.Errorf("exit %d, want 1 (b fails)\n%s%s", code, out.String(), errb.String())
	}
	r := out.String()
	for _, w := range []string{"ok  \texample.com/fx/a\t", "FAIL\texample.com/fx/b\t", "got 1, want 2",
		"skip TestSkipTool: a_test.go:7: frobnicate is missing", "the 3 slowest tests:",
		"\ntests: 5 passed, 1 failed, 2 skipped\n"} {
		if !strings.Contains(r, w) {
			t.Errorf("the report lacks %q:\n%s", w, r)
		}
	}
	if code := Main([]string{filepath.Join(dir, "none")}, nil, &out, &errb); code != 2 {
		t.Errorf("a missing input: exit %d", code)
	}
}

// Merge keeps each line whole however the writers interleave.
func TestMergeWholeLines(t *testing.T) {
	ra, wa := io.Pipe()
	rb, wb := io.Pipe()
	long := strings.Repeat("x", 3<<20)
	done := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(Merge(ra, rb))
		done <- b
	}()
	io.WriteString(wa, "a1 "+long[:1<<20])
	io.WriteString(wb, "b1\nb2\n")
	io.WriteString(wa, long[1<<20:]+"\na2\n")
	io.WriteString(wb, "b3") // no newline at its end
	wb.Close()
	wa.Close()
	got := strings.Split(strings.TrimSuffix(string(<-done), "\n"), "\n")
	want := map[string]bool{"a1 " + long: true, "a2": true, "b1": true, "b2": true, "b3": true}
	if len(got) != len(want) {
		t.Fatalf("%d lines, want %d", len(got), len(want))
	}
	for _, l := range got {
		if !want[l] {
			t.Errorf("a line cut or joined: %.40q...", l)
		}
	}
}

// A package run twice in one stream, part of its tests each time (a lab
// package's lab tests in one go test, the others in another), counts each
// test once, and each run's line lists its own skips only.
func TestPackageRunTwice(t *testing.T) {
	const part = "^(TestPass|TestSkipTool)$"
	first, second := goTestJSON(t, "-run", part, "./a"), goTestJSON(t, "-skip", part, "./a")
	dir := t.TempDir()
	one, other := filepath.Join(dir, "one.json"), filepath.Join(dir, "other.json")
	if err := os.WriteFile(one, append(append([]byte(nil), first...), second...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, first, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CI", "")
	var out, errb bytes.Buffer
	if code := Main([]string{one}, nil, &out, &errb); code != 0 {
		t.Errorf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	r := out.String()
	if !strings.HasSuffix(r, "\ntests: 4 passed, 0 failed, 2 skipped\n") || strings.Count(r, "skip TestSkipTool") != 1 ||
		strings.Count(r, "ok  \texample.com/fx/a\t") != 2 || !strings.Contains(r, "\trun 1, skipped 1, failed 0\n") {
		t.Errorf("the two runs one after the other:\n%s", r)
	}
	// the same two runs in two streams read at once
	if err := os.WriteFile(one, second, 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := Main([]string{one, other}, nil, &out, &errb); code != 0 || !strings.HasSuffix(out.String(), "\ntests: 4 passed, 0 failed, 2 skipped\n") {
		t.Errorf("the two runs in two streams: exit %d\n%s%s", code, out.String(), errb.String())
	}
}
