// Package testsum reads the event stream of `go test -json` and reports
// it the way a person reads a test run: a line per package with the
// number of tests run, skipped and failed; the whole output of each
// failed test and of each package that did not build; every skip with its
// reason; and a closing total ("N passed, N failed, N skipped").
//
// A skip is a test that did not run. On a developer's machine that is
// fine (the tool or the kernel ability is missing here); under CI=true,
// where scripts/test has installed everything, a skip is a failure unless
// the allowlist names it, with its reason. The allowlist is a text file,
// one skip a line:
//
//	PACKAGE TEST REASON...
//
// PACKAGE is an import path or its suffix after the module's path
// ("cmd/gprobes"), TEST a test's name or a path.Match pattern
// ("TestJIT/*"), REASON why that skip is expected on CI machines; blank
// lines and lines starting with # are comments. A run with -short may also
// skip the tests that say "-short: ..." (testkit.SkipShort): they run in
// the full run.
//
// The command is internal/testkit/cmd/testsum; scripts/test pipes every
// go test through it. Given files (or named pipes) instead of its standard
// input, it reads them all at once, a line at a time, and reports them as
// one run: scripts/test runs the lab packages and the others as two go
// test streams side by side.
package testsum

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Event is one line of `go test -json` (cmd/test2json).
type Event struct {
	Time        time.Time
	Action      string
	Package     string
	ImportPath  string // build-output, build-fail
	Test        string
	Elapsed     float64
	Output      string
	FailedBuild string
}

// Allow is one allowlist entry.
type Allow struct {
	Package, Test, Reason string
	Line                  int
	used                  int
}

// ParseAllowlist reads an allowlist (see the package doc).
func ParseAllowlist(r io.Reader) ([]*Allow, error) {
	var out []*Allow
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			return nil, fmt.Errorf("line %d: want PACKAGE TEST REASON, got %q", n, line)
		}
		if _, err := path.Match(f[1], ""); err != nil {
			return nil, fmt.Errorf("line %d: bad test pattern %q: %v", n, f[1], err)
		}
		out = append(out, &Allow{Package: f[0], Test: f[1], Reason: strings.Join(f[2:], " "), Line: n})
	}
	return out, sc.Err()
}

func (a *Allow) matches(pkg, test string) bool {
	if pkg != a.Package && !strings.HasSuffix(pkg, "/"+a.Package) {
		return false
	}
	ok, _ := path.Match(a.Test, test)
	return ok
}

// Options say how to judge the run.
type Options struct {
	CI    bool     // CI=true: a skip not allowed fails the run
	Short bool     // the run had -short: "-short: ..." skips are expected
	Allow []*Allow // the allowlist
	Label string   // names the run in the closing line ("tests", "race")
	// Slowest is how many of the slowest top-level tests the report
	// names before its closing line (0: none).
	Slowest int
}

// Counts are a package's or the run's.
type Counts struct {
	Passed, Failed, Skipped int
}

// Skip is one skipped test.
type Skip struct {
	Package, Test, Reason string
	Allowed               *Allow // the entry that allows it under CI=true
	Short                 bool   // a -short skip in a -short run
}

// Result is what Run saw.
type Result struct {
	Total      Counts
	Packages   map[string]Counts
	Skips      []Skip
	Unlisted   []Skip   // skips that fail the run under CI=true
	FailedPkgs []string // packages that failed (a test, the build, the binary)
	Slowest    []Timed  // the slowest top-level tests, slowest first (at most Slowest of Options)
}

// Timed is a top-level test's wall time, as go test measured it.
type Timed struct {
	Package, Test string
	Elapsed       float64 // seconds
}

// OK reports whether the run passed under its options.
func (r *Result) OK(o Options) bool {
	return len(r.FailedPkgs) == 0 && r.Total.Failed == 0 && (!o.CI || len(r.Unlisted) == 0)
}

type testState struct {
	output []string
	done   bool
}

type pkgState struct {
	tests  map[string]*testState
	order  []string // tests in the order they started
	output []string // the package's own lines (no test)
	build  []string // its build's output
	counts Counts
	skips  []Skip // this run's skips
}

var shortSkip = regexp.MustCompile(`^(\S+\.go:\d+: )?-short: `)

// Run reads the event stream from r and writes the report to w. Lines
// that are not JSON (the go command's own messages) are copied as they
// are.
func Run(r io.Reader, w io.Writer, o Options) (*Result, error) {
	res := &Result{Packages: map[string]Counts{}}
	pkgs := map[string]*pkgState{}
	builds := map[string][]string{} // build output by import path
	get := func(p string) *pkgState {
		s := pkgs[p]
		if s == nil {
			s = &pkgState{tests: map[string]*testState{}}
			pkgs[p] = s
		}
		return s
	}
	rd := bufio.NewReaderSize(r, 1<<20)
	for {
		line, err := rd.ReadString('\n')
		if line != "" {
			var ev Event
			if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &ev) != nil {
				fmt.Fprint(w, line)
			} else {
				handle(w, o, res, pkgs, builds, get, ev)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return res, err
		}
	}
	// packages whose binary died without a final event (a finished
	// run's state is gone: what is left has not finished)
	var left []string
	for p, s := range pkgs {
		if len(s.order) > 0 {
			left = append(left, p)
		}
	}
	sort.Strings(left)
	for _, p := range left {
		s := pkgs[p]
		fmt.Fprintf(w, "--- %s: the test binary ended without a result; its output:\n", p)
		for _, name := range s.order {
			for _, l := range s.tests[name].output {
				fmt.Fprint(w, l)
			}
		}
		for _, l := range s.output {
			fmt.Fprint(w, l)
		}
		res.FailedPkgs = append(res.FailedPkgs, p)
	}
	summary(w, o, res)
	return res, nil
}

func handle(w io.Writer, o Options, res *Result, pkgs map[string]*pkgState, builds map[string][]string, get func(string) *pkgState, ev Event) {
	switch ev.Action {
	case "build-output":
		builds[ev.ImportPath] = append(builds[ev.ImportPath], ev.Output)
		return
	case "build-fail":
		return
	}
	if ev.Package == "" {
		if ev.Output != "" {
			fmt.Fprint(w, ev.Output)
		}
		return
	}
	s := get(ev.Package)
	if ev.Test == "" {
		switch ev.Action {
		case "output":
			s.output = append(s.output, ev.Output)
		case "pass", "fail", "skip":
			finishPackage(w, o, res, s, builds, ev)
			// a package can run again in the same stream (a lab
			// package's lab tests in one go test, its others in
			// another): that run starts from nothing
			delete(pkgs, ev.Package)
		}
		return
	}
	t := s.tests[ev.Test]
	if t == nil {
		t = &testState{}
		s.tests[ev.Test] = t
		s.order = append(s.order, ev.Test)
	}
	switch ev.Action {
	case "output":
		t.output = append(t.output, ev.Output)
	case "pass":
		t.done = true
		s.counts.Passed++
		timed(o, res, ev)
	case "fail":
		t.done = true
		s.counts.Failed++
		timed(o, res, ev)
	case "skip":
		t.done = true
		s.counts.Skipped++
		sk := Skip{Package: ev.Package, Test: ev.Test, Reason: reason(t.output)}
		if o.Short && shortSkip.MatchString(sk.Reason) {
			sk.Short = true
		} else {
			for _, a := range o.Allow {
				if a.matches(ev.Package, ev.Test) {
					sk.Allowed = a
					a.used++
					break
				}
			}
		}
		res.Skips = append(res.Skips, sk)
		s.skips = append(s.skips, sk)
		if sk.Allowed == nil && !sk.Short {
			res.Unlisted = append(res.Unlisted, sk)
		}
	}
}

// timed keeps the slowest top-level tests (a subtest's time is its
// parent's already).
func timed(o Options, res *Result, ev Event) {
	if o.Slowest <= 0 || strings.Contains(ev.Test, "/") {
		return
	}
	res.Slowest = append(res.Slowest, Timed{Package: ev.Package, Test: ev.Test, Elapsed: ev.Elapsed})
	sort.SliceStable(res.Slowest, func(i, j int) bool { return res.Slowest[i].Elapsed > res.Slowest[j].Elapsed })
	if len(res.Slowest) > o.Slowest {
		res.Slowest = res.Slowest[:o.Slowest]
	}
}

// reason is a skipped test's last line of its own (the message t.Skip
// printed), its "file.go:N: " kept.
func reason(output []string) string {
	for i := len(output) - 1; i >= 0; i-- {
		l := strings.TrimSpace(output[i])
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- ") {
			continue
		}
		return l
	}
	return "(no reason given)"
}

func finishPackage(w io.Writer, o Options, res *Result, s *pkgState, builds map[string][]string, ev Event) {
	p := ev.Package
	c := s.counts
	all := res.Packages[p] // the package's runs so far and this one
	all.Passed, all.Failed, all.Skipped = all.Passed+c.Passed, all.Failed+c.Failed, all.Skipped+c.Skipped
	res.Packages[p] = all
	res.Total.Passed += c.Passed
	res.Total.Failed += c.Failed
	res.Total.Skipped += c.Skipped
	failed := ev.Action == "fail"
	if failed {
		res.FailedPkgs = append(res.FailedPkgs, p)
		// the build's output, then each failed test's whole output, then
		// the package's own lines (a panic outside a test, TestMain's
		// words, go test's FAIL line)
		if ev.FailedBuild != "" {
			for _, l := range builds[ev.FailedBuild] {
				fmt.Fprint(w, l)
			}
			delete(builds, ev.FailedBuild)
		}
		for _, name := range s.order {
			t := s.tests[name]
			if !t.done || failedTest(t) {
				for _, l := range t.output {
					fmt.Fprint(w, l)
				}
			}
		}
		for _, l := range s.output {
			if !isSummaryLine(l, p) {
				fmt.Fprint(w, l)
			}
		}
	}
	verdict := "ok  "
	if failed {
		verdict = "FAIL"
	}
	if c == (Counts{}) && !failed {
		if ev.Action == "skip" || noTests(s.output) {
			return // no test files, or no test matched: go test says so and nothing more
		}
	}
	if ev.FailedBuild != "" {
		fmt.Fprintf(w, "%s\t%s [build failed]\n", verdict, p)
	} else {
		fmt.Fprintf(w, "%s\t%s\t%.1fs\trun %d, skipped %d, failed %d\n", verdict, p, ev.Elapsed, c.Passed+c.Failed, c.Skipped, c.Failed)
	}
	for _, sk := range s.skips {
		tag := "skip"
		switch {
		case sk.Short:
			tag = "skip (-short)"
		case sk.Allowed != nil:
			tag = "skip (allowed)"
		case o.CI:
			tag = "SKIP NOT ALLOWED"
		}
		fmt.Fprintf(w, "    %s %s: %s\n", tag, sk.Test, sk.Reason)
	}
}

func failedTest(t *testState) bool {
	for _, l := range t.output {
		if strings.HasPrefix(strings.TrimSpace(l), "--- FAIL") {
			return true
		}
	}
	return false
}

func isSummaryLine(l, pkg string) bool {
	l = strings.TrimSpace(l)
	return l == "FAIL" || l == "PASS" || strings.HasPrefix(l, "FAIL\t"+pkg) || strings.HasPrefix(l, "ok  \t"+pkg)
}

func noTests(output []string) bool {
	for _, l := range output {
		if strings.Contains(l, "[no test files]") || strings.Contains(l, "no tests to run") {
			return true
		}
	}
	return false
}

func summary(w io.Writer, o Options, res *Result) {
	if o.CI && len(res.Unlisted) > 0 {
		fmt.Fprintf(w, "\nCI=true: %d skipped tests not in the allowlist (each needs its tool installed by scripts/test, a fix, or an entry with its reason):\n", len(res.Unlisted))
		for _, sk := range res.Unlisted {
			fmt.Fprintf(w, "    %s %s: %s\n", sk.Package, sk.Test, sk.Reason)
		}
	}
	if len(res.FailedPkgs) > 0 {
		fmt.Fprintf(w, "\nfailed packages: %s\n", strings.Join(res.FailedPkgs, " "))
	}
	if len(res.Slowest) > 0 {
		fmt.Fprintf(w, "\nthe %d slowest tests:\n", len(res.Slowest))
		for _, t := range res.Slowest {
			fmt.Fprintf(w, "    %7.1fs  %s %s\n", t.Elapsed, t.Package, t.Test)
		}
	}
	label := o.Label
	if label == "" {
		label = "tests"
	}
	fmt.Fprintf(w, "\n%s: %d passed, %d failed, %d skipped\n", label, res.Total.Passed, res.Total.Failed, res.Total.Skipped)
}

// Merge reads every reader at once and yields their lines, each whole, in
// the order they come: two go test -json streams read as one run.
func Merge(rs ...io.Reader) io.Reader {
	if len(rs) == 1 {
		return rs[0]
	}
	pr, pw := io.Pipe()
	lines := make(chan string, 256)
	errs := make(chan error, len(rs))
	for _, r := range rs {
		go func() {
			br := bufio.NewReaderSize(r, 1<<20)
			for {
				l, err := br.ReadString('\n')
				if l != "" {
					if !strings.HasSuffix(l, "\n") {
						l += "\n" // a stream cut off mid-line: keep the line whole
					}
					lines <- l
				}
				if err != nil {
					if err == io.EOF {
						err = nil
					}
					errs <- err
					return
				}
			}
		}()
	}
	go func() {
		var first error
		for left := len(rs); left > 0; {
			select {
			case l := <-lines:
				if _, err := io.WriteString(pw, l); err != nil {
					first = err
				}
			case err := <-errs:
				left--
				if first == nil {
					first = err
				}
			}
		}
		for { // lines sent before their reader's end
			select {
			case l := <-lines:
				io.WriteString(pw, l)
				continue
			default:
			}
			break
		}
		pw.CloseWithError(first)
	}()
	return pr
}

// Main is the command: testsum [-ci] [-short] [-allow FILE] [-label L] [-slowest N] [FILE...]
// reads go test -json from stdin, or from every FILE at once (Merge);
// exit status 1 when the run failed.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	o := Options{CI: os.Getenv("CI") == "true"}
	allowFile := ""
	var inputs []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; a {
		case "-ci":
			o.CI = true
		case "-short":
			o.Short = true
		case "-allow", "-label", "-slowest":
			if i+1 == len(args) {
				fmt.Fprintf(stderr, "testsum: %s needs a value\n", a)
				return 2
			}
			i++
			switch a {
			case "-allow":
				allowFile = args[i]
			case "-slowest":
				n, err := strconv.Atoi(args[i])
				if err != nil || n < 0 {
					fmt.Fprintf(stderr, "testsum: -slowest wants a count, got %q\n", args[i])
					return 2
				}
				o.Slowest = n
			default:
				o.Label = args[i]
			}
		default:
			if strings.HasPrefix(a, "-") {
				fmt.Fprintf(stderr, "testsum: unknown argument %q\nusage: go test -json ... | testsum [-ci] [-short] [-allow FILE] [-label NAME] [-slowest N] [FILE...]\n", a)
				return 2
			}
			inputs = append(inputs, a)
		}
	}
	in := stdin
	if len(inputs) > 0 {
		var rs []io.Reader
		for _, name := range inputs {
			f, err := os.Open(name)
			if err != nil {
				fmt.Fprintf(stderr, "testsum: %v\n", err)
				return 2
			}
			defer f.Close()
			rs = append(rs, f)
		}
		in = Merge(rs...)
	}
	if allowFile != "" {
		f, err := os.Open(allowFile)
		if err != nil {
			fmt.Fprintf(stderr, "testsum: %v\n", err)
			return 2
		}
		o.Allow, err = ParseAllowlist(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(stderr, "testsum: %s: %v\n", allowFile, err)
			return 2
		}
	}
	res, err := Run(in, stdout, o)
	if err != nil {
		fmt.Fprintf(stderr, "testsum: %v\n", err)
		return 1
	}
	if !res.OK(o) {
		return 1
	}
	return 0
}
