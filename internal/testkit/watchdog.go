package testkit

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// The per-test watchdog. go test's -timeout bounds a whole test binary:
// set to what the slowest package needs, a test that hangs early in a
// fast package burns that whole budget before anything says so. Every
// test binary that links testkit (directly, or through lab/labkit) runs a
// watchdog instead: every few seconds it looks at the goroutines, finds
// each test and subtest running (its function called by testing.tRunner)
// and how long it has run, not counting the time a test waits in t.Run
// for its subtests, and once one has run longer than its limit it
// prints which, with every goroutine's stack, and ends the binary (exit
// status 2, as go test's own timeout). go test -json then fails the
// package, and testsum prints the hung test's output, the dump included.
//
// The limits, from the environment: GPROBES_TEST_LIMIT (default 10m) for
// a test; GPROBES_LAB_TEST_LIMIT (default 25m) for a test during which
// this process held the lab lock (a lab boots guests under TCG: up to 10
// minutes a boot on a loaded host); GPROBES_TEST_LIMIT=0 turns the
// watchdog off (go test -timeout 0 does not: a test binary run by hand,
// not by go test, has that default). The time a test spends queued for the lab lock, or
// paused by t.Parallel, does not count.
//
// The slowest tests of the suite take under 3 minutes outside the labs
// and under 6 in them (docs/design.md, "Tests"): the limits leave them 3-4
// times that on a loaded machine and still end a hang in minutes.

var watchOnce sync.Once

func init() {
	if testing.Testing() {
		watchOnce.Do(func() { go watch(os.Stdout, exitHung) })
	}
}

// limits are the watchdog's: unit and lab; 0 means off.
func limits() (unit, lab time.Duration) {
	unit, lab = 10*time.Minute, 25*time.Minute
	if d, ok := envDuration("GPROBES_TEST_LIMIT"); ok {
		unit = d
	}
	if d, ok := envDuration("GPROBES_LAB_TEST_LIMIT"); ok {
		lab = d
	}
	return unit, lab
}

func envDuration(name string) (time.Duration, bool) {
	v := os.Getenv(name)
	if v == "" {
		return 0, false
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		fmt.Fprintf(os.Stderr, "testkit: %s=%q is not a duration; the default is used\n", name, v)
		return 0, false
	}
	return d, true
}

// running is a test seen running by the watchdog.
type running struct {
	name    string
	ran     time.Duration // counted run time
	lab     bool          // the lab lock was held at some check while it ran
	checked bool
}

// watch checks the tests every few seconds (a twentieth of the unit
// limit, between 100 ms and 5 s); hung gets the report when a test
// overruns its limit.
func watch(w *os.File, hung func(w *os.File, report string)) {
	tests := map[string]*running{} // by goroutine id and function
	last := time.Now()
	for {
		unit, lab := limits()
		period := min(max(unit/20, 100*time.Millisecond), 5*time.Second)
		time.Sleep(period)
		now := time.Now()
		step := now.Sub(last)
		last = now
		if unit == 0 || lab == 0 {
			continue
		}
		if report := check(tests, allStacks(), step, labLock.waiting.Load() > 0, HoldingLab(), unit, lab); report != "" {
			hung(w, report)
			return
		}
	}
}

// check updates tests from a goroutine dump, a step after the last one,
// and returns a report when a test has overrun its limit.
func check(tests map[string]*running, dump []byte, step time.Duration, paused, labHeld bool, unit, lab time.Duration) string {
	for _, r := range tests {
		r.checked = false
	}
	for _, g := range topTests(dump) {
		r := tests[g.key]
		if r == nil {
			r = &running{name: g.name}
			tests[g.key] = r // its time counts from the next check on
		} else if !paused && !g.paused {
			r.ran += step
		}
		r.checked = true
		r.lab = r.lab || labHeld
	}
	var over []*running
	for k, r := range tests {
		if !r.checked {
			delete(tests, k) // ended
			continue
		}
		if limit := unit; r.ran > limit && !(r.lab && r.ran <= lab) {
			over = append(over, r)
		}
	}
	if len(over) == 0 {
		return ""
	}
	sort.Slice(over, func(i, j int) bool { return over[i].ran > over[j].ran })
	var b strings.Builder
	for _, r := range over {
		limit, which := unit, "GPROBES_TEST_LIMIT"
		if r.lab {
			limit, which = lab, "GPROBES_LAB_TEST_LIMIT, a test that held the lab lock"
		}
		fmt.Fprintf(&b, "testkit: %s has run for %v, over its limit of %v (%s): taken as hung, the test binary ends here.\n",
			r.name, r.ran.Round(time.Second), limit, which)
	}
	b.WriteString("testkit: the tests running (a subtest is its parent's closure, funcN):\n")
	var all []*running
	for _, r := range tests {
		all = append(all, r)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].name < all[j].name })
	for _, r := range all {
		fmt.Fprintf(&b, "\t%s (%v)\n", r.name, r.ran.Round(time.Second))
	}
	b.WriteString("testkit: every goroutine:\n\n")
	b.Write(dump)
	return b.String()
}

type topTest struct {
	key, name string
	// paused: waiting in t.Run for a subtest (whose own time counts), or
	// in t.Parallel for its turn
	paused bool
}

// topTests finds in a dump (runtime.Stack of all goroutines) the
// goroutines running a test or subtest: the frame called by
// testing.tRunner is its function (pkg.TestName, or a closure
// pkg.TestName.funcN for a subtest).
func topTests(dump []byte) []topTest {
	var out []topTest
	for _, g := range bytes.Split(dump, []byte("\n\n")) {
		lines := strings.Split(string(g), "\n")
		if len(lines) == 0 || !strings.HasPrefix(lines[0], "goroutine ") {
			continue
		}
		id := strings.Fields(lines[0])[1]
		var fn, prev string
		paused := false
		for _, l := range lines[1:] {
			if l == "" || l[0] == '\t' || strings.HasPrefix(l, "...") {
				continue // a frame's file and line, or frames elided
			}
			if strings.HasPrefix(l, "testing.(*T).Run(") || strings.HasPrefix(l, "testing.(*T).Parallel(") {
				paused = true
			}
			if strings.HasPrefix(l, "testing.tRunner(") {
				fn = funcName(prev)
				break
			}
			prev = l
		}
		name, ok := testName(fn)
		if !ok {
			continue
		}
		out = append(out, topTest{key: id + " " + fn, name: name, paused: paused})
	}
	return out
}

// funcName is a frame's function: "pkg/path.TestX(0xc000...)" ->
// "pkg/path.TestX".
func funcName(frame string) string {
	if i := strings.LastIndexByte(frame, '('); i > 0 {
		return frame[:i]
	}
	return frame
}

// testName is a test's name from its function's: the last element of the
// path without its package ("TestX", "TestX.func1" for a subtest); false
// for the testing package's own runners.
func testName(fn string) (string, bool) {
	if fn == "" || strings.HasPrefix(fn, "testing.") {
		return "", false
	}
	base := fn[strings.LastIndexByte(fn, '/')+1:]
	_, name, ok := strings.Cut(base, ".")
	return name, ok && name != ""
}

func allStacks() []byte {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}

// exitHung prints the report and ends the test binary as go test's own
// timeout does (exit status 2), after removing the fixtures.
func exitHung(w *os.File, report string) {
	fmt.Fprint(w, "\n"+report)
	if !strings.HasSuffix(report, "\n") {
		fmt.Fprintln(w)
	}
	w.Sync()
	Cleanup()
	os.Exit(2)
}
