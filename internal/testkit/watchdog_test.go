package testkit

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/internal/testkit/testsum"
)

// The dump parser on this Go's own format: the running test is found; a
// test waiting in t.Run for a subtest is paused, the subtest counts.
func TestTopTests(t *testing.T) {
	find := func(tt []topTest, name string) *topTest {
		for i := range tt {
			if tt[i].name == name {
				return &tt[i]
			}
		}
		return nil
	}
	if x := find(topTests(allStacks()), "TestTopTests"); x == nil || x.paused {
		t.Fatalf("TestTopTests not running (%+v) in:\n%s", x, allStacks())
	}
	t.Run("sub", func(t *testing.T) {
		tt := topTests(allStacks())
		if x := find(tt, "TestTopTests"); x == nil || !x.paused {
			t.Errorf("the parent is not waiting for its subtest: %+v", tt)
		}
		if x := find(tt, "TestTopTests.func2"); x == nil || x.paused {
			t.Errorf("the subtest is not running: %+v", tt)
		}
	})
}

// A hung test ends its binary after its limit, with a report naming it and
// every goroutine's stack, and testsum shows that report in full for the
// failed package. The helper mode (TESTKIT_HANG=1) is the hung test.
func TestWatchdogEndsAHungTest(t *testing.T) {
	if os.Getenv("TESTKIT_HANG") == "1" {
		bystander := make(chan int)
		go bystanderWaits(bystander)
		hangHere()
		return
	}
	goTool := Tool(t, "go")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	hung := exec.CommandContext(ctx, os.Args[0], "-test.v=test2json", "-test.run=^TestWatchdogEndsAHungTest$")
	hung.Env = append(os.Environ(), "TESTKIT_HANG=1", "GPROBES_TEST_LIMIT=1s")
	raw, err := hung.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the hung test still ran after 2 minutes (a limit of 1 s):\n%s", raw)
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Fatalf("the hung test's binary: %v, want exit status 2:\n%s", err, raw)
	}
	// as go test -json shows it
	conv := exec.Command(goTool, "tool", "test2json", "-t", "-p", "example/hung")
	conv.Stdin = bytes.NewReader(raw)
	out, err := conv.Output()
	if err != nil {
		t.Fatal(err)
	}
	var rep bytes.Buffer
	res, rerr := testsum.Run(bytes.NewReader(out), &rep, testsum.Options{})
	if rerr != nil {
		t.Fatal(rerr)
	}
	r := rep.String()
	for _, want := range []string{
		"TestWatchdogEndsAHungTest has run for",
		"over its limit of 1s (GPROBES_TEST_LIMIT)",
		"every goroutine:",
		"testkit.hangHere(",       // the hung test's stack
		"testkit.bystanderWaits(", // and another goroutine's
	} {
		if !strings.Contains(r, want) {
			t.Errorf("testsum's report lacks %q:\n%s", want, r)
		}
	}
	if len(res.FailedPkgs) != 1 || res.FailedPkgs[0] != "example/hung" {
		t.Errorf("failed packages %v, want example/hung", res.FailedPkgs)
	}
}

//go:noinline
func hangHere() {
	for {
		time.Sleep(time.Second)
	}
}

//go:noinline
func bystanderWaits(c chan int) { <-c }

// The limits: a test that held the lab lock gets the lab's; time paused
// (queued for the lab lock, in t.Parallel, in t.Run waiting for a
// subtest) does not count.
func TestWatchdogCheck(t *testing.T) {
	dump := []byte("goroutine 7 [sleep]:\n" +
		"time.Sleep(0x3b9aca00)\n\t/go/src/runtime/time.go:1 +0x1\n" +
		"example.com/p.TestA(0xc0001)\n\t/p/a_test.go:9 +0x2\n" +
		"testing.tRunner(0xc0001, 0x1)\n\t/go/src/testing/testing.go:1 +0x3\n" +
		"created by testing.(*T).Run in goroutine 1\n\t/go/src/testing/testing.go:2 +0x4\n\n" +
		"goroutine 9 [chan receive]:\n" +
		"testing.(*T).Parallel(0xc0002)\n\t/go/src/testing/testing.go:3 +0x1\n" +
		"example.com/p.TestB(0xc0002)\n\t/p/b_test.go:5 +0x2\n" +
		"testing.tRunner(0xc0002, 0x2)\n\t/go/src/testing/testing.go:1 +0x3\n" +
		"created by testing.(*T).Run in goroutine 1\n\t/go/src/testing/testing.go:2 +0x4\n")
	tests := map[string]*running{}
	const unit, lab = 10 * time.Minute, 25 * time.Minute
	step := func(d time.Duration, paused, labHeld bool) string {
		return check(tests, dump, d, paused, labHeld, unit, lab)
	}
	if r := step(time.Minute, false, false); r != "" { // first seen: counts from here
		t.Fatal(r)
	}
	if r := step(9*time.Minute, false, false); r != "" {
		t.Fatal(r)
	}
	if r := step(time.Hour, true, false); r != "" { // queued for the lab lock
		t.Fatal(r)
	}
	if r := step(2*time.Minute, false, true); r != "" { // 11 minutes, the lab lock held: a lab test
		t.Fatal(r)
	}
	r := step(15*time.Minute, false, false)
	if !strings.Contains(r, "TestA has run for 26m0s, over its limit of 25m0s (GPROBES_LAB_TEST_LIMIT") ||
		!strings.Contains(r, "\tTestA (26m0s)\n\tTestB (0s)\n") ||
		strings.Contains(r, "TestB has run") || !strings.Contains(r, "\tTestB (0s)") {
		t.Errorf("report:\n%s", r)
	}
}

// A subtest's hang is the subtest's: its parent, waiting in t.Run, is not
// over its limit however long the subtests take together.
func TestWatchdogSubtest(t *testing.T) {
	dump := []byte("goroutine 7 [chan receive]:\n" +
		"testing.(*T).Run(0xc0001, {0x1, 0x2}, 0x3)\n\t/go/src/testing/testing.go:3 +0x1\n" +
		"example.com/p.TestC(0xc0001)\n\t/p/c_test.go:9 +0x2\n" +
		"testing.tRunner(0xc0001, 0x1)\n\t/go/src/testing/testing.go:1 +0x3\n" +
		"created by testing.(*T).Run in goroutine 1\n\t/go/src/testing/testing.go:2 +0x4\n\n" +
		"goroutine 8 [select]:\n" +
		"example.com/p.TestC.func1(0xc0002)\n\t/p/c_test.go:12 +0x2\n" +
		"testing.tRunner(0xc0002, 0x2)\n\t/go/src/testing/testing.go:1 +0x3\n" +
		"created by testing.(*T).Run in goroutine 7\n\t/go/src/testing/testing.go:2 +0x4\n")
	tests := map[string]*running{}
	check(tests, dump, 0, false, false, 10*time.Minute, 25*time.Minute)
	r := check(tests, dump, 11*time.Minute, false, false, 10*time.Minute, 25*time.Minute)
	if !strings.Contains(r, "TestC.func1 has run for 11m0s") || strings.Contains(r, "TestC has run") || !strings.Contains(r, "\tTestC (0s)\n") {
		t.Errorf("report:\n%s", r)
	}
}
