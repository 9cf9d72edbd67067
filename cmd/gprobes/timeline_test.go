package main

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gprobes/gprobes/daemon"
	"github.com/gprobes/gprobes/internal/babeltrace"
	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/internal/tracecheck"
	"github.com/gprobes/gprobes/pad"
	"github.com/gprobes/gprobes/perfetto"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/timeline"
)

// Timelines of real records (testdata/timeline/timeline.c): gprobes run
// and gprobes log write CTF and Perfetto traces of a process's calls and
// of the kernel's tracepoints, read back with babeltrace2 and decoded
// field by field; log --hist prints their words' histograms.

// timelineCalls is the number of calls each of the fixture's two threads
// makes.
const timelineCalls = 300

func timelineFixture(t *testing.T) string {
	t.Helper()
	return testkit.CC(t, "timeline", "-O1", "-g", "-pthread", "-no-pie", "../../testdata/timeline/timeline.c")
}

// timelineDPDF probes the fixture's functions: outer and inner at entry
// (outer's a log record, inner's a trace) and return (the other way
// round), mark's argument and a constant as a trace, and boom's 100 / x,
// a divide-by-zero exception when x is 0 (the div: line 34).
func timelineDPDF(t *testing.T, prog string) string {
	t.Helper()
	src := fmt.Sprintf(`name = %s
modtype = user
major = 7
offset = outer
minor = 1
push r,rdi
log 1
exit 1
retprobe = outer
minor = 2
push r,rax
log 1
exit 2
offset = inner
minor = 3
push r,rdi
log 1
exit 2
retprobe = inner
minor = 4
push r,rax
log 1
exit 1
offset = mark
minor = 5
push r,rdi
push d,0x1122
log 2
exit 2
offset = boom
minor = 6
push d,100
push r,rdi
div
log 1
exit 1
`, prog)
	p := filepath.Join(t.TempDir(), "timeline.dpdf")
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// timelineDivLine is the line of the div in timelineDPDF's file.
const timelineDivLine = 34

func words(ws ...uint64) []byte {
	var b []byte
	for _, w := range ws {
		b = binary.LittleEndian.AppendUint64(b, w)
	}
	return b
}

// checkCalls checks the events of the fixture's calls mode, as a trace
// holds them: on each of the process's two threads, for each i, the slice
// of outer(i) with the slice of inner(i) in it, mark(i)'s trace event and
// boom(i % 3)'s record or exception, every field of every record; and
// nothing else.
func checkCalls(t *testing.T, what string, evs []timeline.Event, prog, target string, pid int) {
	t.Helper()
	syms := map[string]uint64{}
	f, err := elf.Open(prog)
	if err != nil {
		t.Fatal(err)
	}
	ss, _ := f.Symbols()
	f.Close()
	for _, s := range ss {
		syms[s.Name] = s.Value
	}
	threads, by := tracecheck.ByThread(evs)
	if len(threads) != 2 {
		t.Fatalf("%s: %d threads %v, want 2", what, len(threads), threads)
	}
	tids := map[int]bool{}
	for _, th := range threads {
		if th.Target != target || th.Pid != pid {
			t.Errorf("%s: thread %+v, want target %s pid %d", what, th, target, pid)
		}
		tids[th.Tid] = true
		var slices, marks, booms []timeline.Event
		for i, e := range by[th] {
			if i > 0 && e.Time.Before(by[th][i-1].Time) {
				t.Fatalf("%s: thread %d: event %d goes back in time: %v after %v", what, th.Tid, i, e.Time, by[th][i-1].Time)
			}
			switch e.Location {
			case "outer", "inner":
				slices = append(slices, e)
			case "mark":
				marks = append(marks, e)
			case "boom":
				booms = append(booms, e)
			default:
				t.Fatalf("%s: an event of %q", what, e.Location)
			}
			if e.Module != prog || e.Major != 7 || e.Target != target || e.Pid != pid || e.Tid != th.Tid {
				t.Fatalf("%s: %+v", what, *e.Record)
			}
		}
		if len(slices) != 4*timelineCalls || len(marks) != timelineCalls || len(booms) != timelineCalls {
			t.Fatalf("%s: thread %d: %d slice events, %d marks, %d booms; want %d, %d, %d", what, th.Tid,
				len(slices), len(marks), len(booms), 4*timelineCalls, timelineCalls, timelineCalls)
		}
		type want struct {
			typ   timeline.EventType
			loc   string
			probe string
			kind  probe.RecordKind
			minor uint16
			exit  uint8
			data  []byte
		}
		for i := 0; i < timelineCalls; i++ {
			u := uint64(i)
			for j, w := range []want{
				{timeline.Begin, "outer", "", "log", 1, 1, words(u)},
				{timeline.Begin, "inner", "", "trace", 3, 2, words(u)},
				{timeline.End, "inner", "retprobe", "log", 4, 1, words(2*u + 1)},
				{timeline.End, "outer", "retprobe", "trace", 2, 2, words(2*u + 2)},
			} {
				e := slices[4*i+j]
				if e.Type != w.typ || e.Location != w.loc || e.Probe != w.probe || e.Kind != w.kind || e.Minor != w.minor ||
					e.Exit != w.exit || string(e.Data) != string(w.data) || e.Truncated {
					t.Fatalf("%s: thread %d call %d event %d: %v %+v, want %+v", what, th.Tid, i, j, e.Type, *e.Record, w)
				}
				if w.probe == "" && e.Address != syms[w.loc] {
					t.Errorf("%s: %s's address %#x, want %#x", what, w.loc, e.Address, syms[w.loc])
				}
			}
			if e := marks[i]; e.Type != timeline.Instant || e.Kind != "trace" || e.Minor != 5 || e.Exit != 2 ||
				string(e.Data) != string(words(u, 0x1122)) || e.Address != syms["mark"] {
				t.Fatalf("%s: thread %d mark %d: %+v", what, th.Tid, i, *e.Record)
			}
			e := booms[i]
			if i%3 == 0 {
				if e.Type != timeline.Instant || e.Kind != "exception" || e.Exception != "divide-by-zero" || e.Minor != 6 ||
					!strings.HasSuffix(e.Line, fmt.Sprintf(":%d:1", timelineDivLine)) || len(e.Data) != 0 {
					t.Fatalf("%s: thread %d boom %d: %+v", what, th.Tid, i, *e.Record)
				}
			} else if e.Type != timeline.Instant || e.Kind != "log" || e.Minor != 6 || e.Exit != 1 ||
				string(e.Data) != string(words(100/uint64(i%3))) {
				t.Fatalf("%s: thread %d boom %d: %+v", what, th.Tid, i, *e.Record)
			}
		}
	}
	if !tids[pid] {
		t.Errorf("%s: no thread is the main thread %d: %v", what, pid, tids)
	}
}

// runTimeline runs the fixture under gprobes run --format and returns the
// process's pid (from the summary) and run's output.
func runTimeline(t *testing.T, args ...string) (int, string) {
	t.Helper()
	out, errs, code := gprobes(t, append([]string{"run"}, args...)...)
	if code != 0 {
		t.Fatalf("gprobes run %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
	}
	m := regexp.MustCompile(`(?m)^pid:(\d+) `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no pid in the summary:\n%s", out)
	}
	pid, _ := strconv.Atoi(m[1])
	return pid, out
}

// gprobes run --format ctf|perfetto -o OUT on a process: the trace holds
// every record, the calls as nested slices; no record is lost.
func TestRunTimeline(t *testing.T) {
	prog := timelineFixture(t)
	probe := timelineDPDF(t, prog)
	for _, format := range []string{"ctf", "perfetto"} {
		t.Run(format, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "trace")
			pid, sum := runTimeline(t, "--format", format, "-o", out, probe, "--", prog, "calls", strconv.Itoa(timelineCalls))
			var evs []timeline.Event
			var losses []timeline.Loss
			if format == "ctf" {
				evs, losses = tracecheck.ReadCTF(t, out)
			} else {
				evs, losses = tracecheck.ReadPerfetto(t, out)
			}
			checkCalls(t, format, evs, prog, fmt.Sprintf("pid:%d", pid), pid)
			if len(losses) != 0 {
				t.Errorf("losses %+v", losses)
			}
			if strings.Contains(sum, "{") || strings.Contains(sum, "outer\n") {
				t.Errorf("records printed with --format:\n%s", sum)
			}
			// mark's records came through a jump pad's ring, the others'
			// by int3: the trace has each thread's in order all the same
			if !regexp.MustCompile(`\bmark\s+0x[0-9a-f]+\s+\S+\s+jump\s`).MatchString(sum) {
				t.Errorf("mark is not on a jump pad:\n%s", sum)
			}
		})
	}
}

// The kernel target: gprobes run --target kernel on the system calls of
// the fixture's two threads: a track per task, each tracepoint's records
// in order with their data.
func TestRunTimelineKernel(t *testing.T) {
	needKernelBPF(t)
	prog := timelineFixture(t)
	src := filepath.Join(t.TempDir(), "k.dpdf")
	os.WriteFile(src, []byte(`name = vmlinux
modtype = kernel
major = 9
tracepoint = syscalls:sys_enter_getppid
minor = 1
push tid
log 1
exit 1
tracepoint = syscalls:sys_exit_getppid
minor = 2
push field,ret
log 1
exit 2
`), 0o644)
	const n = 500
	for _, format := range []string{"ctf", "perfetto"} {
		t.Run(format, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "trace")
			mustRun(t, "run", "--target", "kernel", "--format", format, "-o", out, src, "--", prog, "getppid", strconv.Itoa(n))
			var evs []timeline.Event
			var losses []timeline.Loss
			if format == "ctf" {
				evs, losses = tracecheck.ReadCTF(t, out)
			} else {
				evs, losses = tracecheck.ReadPerfetto(t, out)
			}
			if len(losses) != 0 {
				t.Errorf("losses %+v", losses)
			}
			threads, by := tracecheck.ByThread(evs)
			if len(threads) != 2 {
				t.Fatalf("%d tasks %v, want 2", len(threads), threads)
			}
			for _, th := range threads {
				if th.Target != "kernel" || th.Pid == 0 || threads[0].Pid != th.Pid {
					t.Errorf("task %+v", th)
				}
				evs := by[th]
				if len(evs) != 2*n {
					t.Fatalf("task %d: %d events, want %d", th.Tid, len(evs), 2*n)
				}
				for i, e := range evs {
					loc, kind, minor, exit, data := "syscalls:sys_enter_getppid", probe.RecordLog, uint16(1), uint8(1), words(uint64(th.Tid))
					if i%2 == 1 {
						loc, kind, minor, exit, data = "syscalls:sys_exit_getppid", probe.RecordTrace, 2, 2, words(uint64(os.Getpid()))
					}
					if e.Type != timeline.Instant || e.Location != loc || e.Probe != "tracepoint" || e.Kind != kind || e.Minor != minor ||
						e.Exit != exit || e.Major != 9 || e.Module != "vmlinux" || string(e.Data) != string(data) || e.CPU < 0 {
						t.Fatalf("task %d event %d: %+v", th.Tid, i, *e.Record)
					}
				}
			}
		})
	}
}

// gprobes log --format ctf|perfetto: the daemon's log of the fixture's
// calls, every record of it in the trace exactly as log --json prints it,
// and log --hist's histograms of it.
func TestLogTimeline(t *testing.T) {
	prog := timelineFixture(t)
	sock, _ := startDaemon(t)
	mustRun(t, "insert", "--socket", sock, "--target", fmt.Sprintf("exec:%s calls %d", prog, timelineCalls), timelineDPDF(t, prog))
	lines := fixtureLog(t, sock)
	pid, want := fixtureEvents(t, prog, lines)
	dir := t.TempDir()
	ctfDir, pf := filepath.Join(dir, "ctf"), filepath.Join(dir, "trace.pftrace")
	_, errs, code := gprobes(t, "log", "--socket", sock, "--format", "ctf", "-o", ctfDir)
	if code != 0 || !strings.Contains(errs, fmt.Sprintf("%d records, %d slices (ctf format)", 12*timelineCalls, 4*timelineCalls)) {
		t.Fatalf("log --format ctf: exit %d\n%s", code, errs)
	}
	tracecheck.CTF(t, ctfDir, want, nil)
	mustRun(t, "log", "--socket", sock, "--format", "perfetto", "-o", pf)
	tracecheck.Perfetto(t, pf, want, nil)

	// --hist 1: the second word, which only mark logs; --hist 0: the
	// first word of each probe's records; exceptions and records without
	// the word left out of each probe's records; exceptions and
	// records without the word left out
	out, errs, code := gprobes(t, "log", "--socket", sock, "--hist", "1")
	if code != 0 {
		t.Fatalf("log --hist 1: exit %d\n%s", code, errs)
	}
	key := func(minor int, loc string) string {
		return fmt.Sprintf("@[pid:%d, %s, %d, %s]: \n", pid, prog, minor, loc)
	}
	if want := key(5, "mark") + "[4K, 8K)             600 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n\n"; out != want {
		t.Errorf("log --hist 1:\n%s\nwant\n%s", out, want)
	}
	if !strings.Contains(errs, "600 records of @[pid:") || !strings.Contains(errs, "have no word 1 (fewer than 2 words logged)") {
		t.Errorf("log --hist 1's messages:\n%s", errs)
	}
	out = mustRun(t, "log", "--socket", sock, "--hist", "0")
	// the counts of each bucket, from the values the fixture logs
	expect := func(vals func(i int) (int64, bool)) string {
		counts := map[int]int{}
		lo, hi := 99, -1
		for th := 0; th < 2; th++ {
			for i := 0; i < timelineCalls; i++ {
				v, ok := vals(i)
				if !ok {
					continue
				}
				b := 1 // [0]
				for x := v; x > 0; x >>= 1 {
					b++
				}
				counts[b]++
				lo, hi = min(lo, b), max(hi, b)
			}
		}
		top := 0
		for _, c := range counts {
			top = max(top, c)
		}
		var sb strings.Builder
		for b := lo; b <= hi; b++ {
			bound := func(x int) string {
				if x >= 1024 {
					return fmt.Sprintf("%dK", x/1024)
				}
				return strconv.Itoa(x)
			}
			label := fmt.Sprintf("[%d]", b-1)
			if b > 2 {
				label = fmt.Sprintf("[%s, %s)", bound(1<<(b-2)), bound(1<<(b-1)))
			}
			// bpftrace's bar: count / (float)max * 52, truncated
			bar := strings.Repeat("@", int(float32(counts[b])/float32(top)*52))
			fmt.Fprintf(&sb, "%-16s%8d |%-52s|\n", label, counts[b], bar)
		}
		return sb.String()
	}
	for _, c := range []struct {
		minor int
		loc   string
		vals  func(i int) (int64, bool)
	}{
		{1, "outer", func(i int) (int64, bool) { return int64(i), true }},
		{2, "retprobe outer", func(i int) (int64, bool) { return int64(2*i + 2), true }},
		{4, "retprobe inner", func(i int) (int64, bool) { return int64(2*i + 1), true }},
		{6, "boom", func(i int) (int64, bool) { return int64(100 / max(i%3, 1)), i%3 != 0 }},
	} {
		if want := key(c.minor, c.loc) + expect(c.vals); !strings.Contains(out, want) {
			t.Errorf("log --hist 0 lacks\n%s\nin\n%s", want, out)
		}
	}
	if n := strings.Count(out, "@[pid:"); n != 6 {
		t.Errorf("log --hist 0: %d histograms, want 6:\n%s", n, out)
	}
}

// gprobes log --follow --format ctf|perfetto and --follow --hist: started
// before the module is inserted, they write the records committed from
// then on; the CTF trace is whole on disk before the signal (what a
// SIGKILLed follower leaves is readable), and at SIGINT each trace holds
// every record, paired into slices (the return probes learned from the
// daemon when the new module's first record came), as log --json has them.
func TestLogTimelineFollow(t *testing.T) {
	prog := timelineFixture(t)
	sock, _ := startDaemon(t)
	dir := t.TempDir()
	ctfDir, pf := filepath.Join(dir, "ctf"), filepath.Join(dir, "trace.pftrace")
	exe, _ := os.Executable()
	type follower struct {
		cmd      *exec.Cmd
		out, err lockedBuffer
	}
	var fs []*follower
	for _, args := range [][]string{{"--format", "ctf", "-o", ctfDir}, {"--format", "perfetto", "-o", pf}, {"--hist", "1"}} {
		f := &follower{cmd: exec.Command(exe, append([]string{"log", "--follow", "--socket", sock}, args...)...)}
		f.cmd.Env = append(os.Environ(), "GPROBES_TEST_MAIN=1")
		f.cmd.Stdout, f.cmd.Stderr = &f.out, &f.err
		if err := f.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer f.cmd.Process.Kill()
		fs = append(fs, f)
	}
	// the log's follow stream is open once the daemon has a reader: the
	// trace writers say so; --hist says nothing, so a moment more
	for _, f := range fs[:2] {
		for end := time.Now().Add(20 * time.Second); !strings.Contains(f.err.String(), "from now on"); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("log --follow %v never started:\n%s", f.cmd.Args, f.err.String())
			}
		}
	}
	time.Sleep(500 * time.Millisecond)
	mustRun(t, "insert", "--socket", sock, "--target", fmt.Sprintf("exec:%s calls %d", prog, timelineCalls), timelineDPDF(t, prog))
	lines := fixtureLog(t, sock)
	pid, want := fixtureEvents(t, prog, lines)
	// before the signal: once the window (1 s) and a tick (1 s) have
	// passed, every record is in the CTF trace's stream files, in whole
	// packets that babeltrace2 reads
	var seen string
	for end := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		evs, _, err := babeltrace.Try(t, ctfDir)
		if err == nil && len(evs) >= len(want) {
			break
		}
		seen = fmt.Sprintf("%d events of %d, %v", len(evs), len(want), err)
		if time.Now().After(end) {
			t.Fatalf("log --follow --format ctf: a minute after the records were committed, the trace on disk has %s", seen)
		}
	}
	tracecheck.CTF(t, ctfDir, want, nil)
	for _, f := range fs {
		f.cmd.Process.Signal(syscall.SIGINT)
	}
	for _, f := range fs {
		if err := f.cmd.Wait(); err != nil {
			t.Fatalf("log --follow %v: %v\n%s%s", f.cmd.Args, err, f.out.String(), f.err.String())
		}
	}
	for _, f := range fs[:2] {
		if s := fmt.Sprintf("%d records, %d slices", 12*timelineCalls, 4*timelineCalls); !strings.Contains(f.err.String(), s) {
			t.Errorf("log --follow %v says\n%s\nwant %q", f.cmd.Args, f.err.String(), s)
		}
	}
	tracecheck.CTF(t, ctfDir, want, nil)
	tracecheck.Perfetto(t, pf, want, nil)
	key := fmt.Sprintf("@[pid:%d, %s, %d, %s]: \n", pid, prog, 5, "mark")
	if want := key + "[4K, 8K)             600 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n\n"; fs[2].out.String() != want {
		t.Errorf("log --follow --hist 1:\n%s\nwant\n%s", fs[2].out.String(), want)
	}
}

// fixtureLog waits for the daemon's log to hold the fixture's 12 records
// a call (30 s at most) and returns them as log --json prints them.
func fixtureLog(t *testing.T, sock string) []daemon.LogLine {
	t.Helper()
	var lines []daemon.LogLine
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		lines = lines[:0]
		sc := bufio.NewScanner(strings.NewReader(mustRun(t, "log", "--socket", sock, "--json")))
		for sc.Scan() {
			var l daemon.LogLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, l)
		}
		if len(lines) >= 12*timelineCalls {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("%d records in the log, want %d", len(lines), 12*timelineCalls)
		}
	}
	if len(lines) != 12*timelineCalls {
		t.Fatalf("%d records in the log, want %d", len(lines), 12*timelineCalls)
	}
	return lines
}

// fixtureEvents is what a trace of the fixture's log must hold: the
// records as log --json printed them, paired, checked against the
// fixture's calls; and the fixture's pid.
func fixtureEvents(t *testing.T, prog string, lines []daemon.LogLine) (int, []timeline.Event) {
	t.Helper()
	pid := lines[0].Pid
	tee := &tracecheck.Tee{W: nullWriter{}}
	b := timeline.NewBuilder(tee)
	b.Returns(prog, "outer")
	b.Returns(prog, "inner")
	for i := range lines {
		r, err := recordOf(&lines[i])
		if err != nil {
			t.Fatal(err)
		}
		b.Add(r)
	}
	b.Flush()
	checkCalls(t, "log --json", tee.Events, prog, fmt.Sprintf("pid:%d", pid), pid)
	return pid, tee.Events
}

type nullWriter struct{}

func (nullWriter) Event(timeline.Event) {}
func (nullWriter) Loss(timeline.Loss)   {}
func (nullWriter) Close() error         { return nil }

// The flags' mistakes are refused with a word on what to give.
func TestTimelineFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"log", "--format", "ctf"}, "--format writes a trace: give -o OUT"},
		{[]string{"log", "--format", "svg", "-o", "x"}, `--format "svg": ctf or perfetto`},
		{[]string{"log", "--hist", "0", "--format", "ctf", "-o", "x"}, "--format or --hist, not both"},
		{[]string{"log", "-o", "x"}, "-o writes a trace: give --format"},
		{[]string{"run", "--format", "ctf", examples + "/malloc.dpdf", "--", "true"}, "--format writes a trace: give -o OUT"},
	} {
		_, errs, code := gprobes(t, c.args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, %s; want 2 and %q", c.args, code, errs, c.want)
		}
	}
}

// Records a jump pad's full ring dropped are in the trace as a count: a
// gprobes:lost event and babeltrace2's discarded events in CTF, a
// "records lost" event and the counter in Perfetto; records in the trace
// and lost add up to the hits, exactly. gprobes run is frozen (SIGSTOP)
// while the fixture's two threads call mark 50,000 times each, so the
// smallest ring (64 KiB) keeps 1,024 records of two logged words and the
// pad counts the other 98,976 lost, every run.
func TestRunTimelineLost(t *testing.T) {
	prog := timelineFixture(t)
	src := filepath.Join(t.TempDir(), "m.dpdf")
	os.WriteFile(src, []byte(fmt.Sprintf("name = %s\nmodtype = user\noffset = mark\nminor = 5\npush r,rdi\npush d,0x1122\nlog 2\nexit 2\n", prog)), 0o644)
	const n = 50000
	kept := uint64(ringHolds(pad.MinRingSize, 2))
	if kept != 1024 {
		t.Fatalf("the ring holds %d records, want 1024 (the record layout changed: fix ringHolds)", kept)
	}
	for _, format := range []string{"ctf", "perfetto"} {
		t.Run(format, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "trace")
			pid, sum := runFrozen(t, []string{"--ring", "64KiB", "--format", format, "-o", out, src, "--", prog, "calls", strconv.Itoa(n), "wait"})
			m := regexp.MustCompile(`\bmark\s+0x[0-9a-f]+\s+\S+\s+jump\s+(\d+)\s+0\s+0\s+0\s+0\s+(\d+)\s`).FindStringSubmatch(sum)
			if m == nil {
				t.Fatalf("no row of mark on a jump pad:\n%s", sum)
			}
			hits, _ := strconv.ParseUint(m[1], 10, 64)
			lost, _ := strconv.ParseUint(m[2], 10, 64)
			var evs []timeline.Event
			var losses []timeline.Loss
			if format == "ctf" {
				evs, losses = tracecheck.ReadCTF(t, out)
			} else {
				evs, losses = tracecheck.ReadPerfetto(t, out)
			}
			if hits != 2*n || uint64(len(evs)) != kept || lost != hits-kept {
				t.Fatalf("%d records in the trace + %d lost, %d hits; want %d + %d, %d", len(evs), lost, hits, kept, 2*n-kept, 2*n)
			}
			t.Logf("%d records in the trace, %d lost", len(evs), lost)
			want := []timeline.Loss{{Target: fmt.Sprintf("pid:%d", pid), Module: prog, Minor: 5, Location: "mark", Records: lost,
				Why: "lost in the process: its jump pads' ring was full"}}
			if len(losses) == 1 {
				losses[0].Time = time.Time{}
			}
			if !reflect.DeepEqual(losses, want) {
				t.Errorf("losses %+v, want %+v", losses, want)
			}
			if format == "ctf" {
				_, disc := babeltrace.Read(t, out)
				if len(disc) != 1 || disc[0].Count != lost {
					t.Errorf("babeltrace2 reports %+v discarded, want %d", disc, lost)
				}
			} else {
				b, _ := os.ReadFile(out)
				packets, _ := perfetto.Read(b)
				events, _, _ := perfetto.Resolve(packets)
				var counter []int64
				for _, e := range events {
					if e.Track.UUID == perfetto.TrackLost {
						counter = append(counter, e.Counter)
					}
				}
				if !reflect.DeepEqual(counter, []int64{0, int64(lost)}) {
					t.Errorf("the lost-records counter %v, want [0 %d]", counter, lost)
				}
			}
		})
	}
}
