package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gprobes/gprobes/internal/testkit"
)

// Switching (docs/language.md, "Switching") on real targets: the
// stateful trace "B recorded only between A and C" with exact counts on
// a process (int3 route and jump pads, 4 threads) and on the kernel
// target (tracepoints, the pid filter of run --target kernel -- CMD), and
// gprobes enable/disable through the daemon on a process (both routes)
// and on the kernel target, exact counts before and after. The fixture is
// testdata/switch/switch.c.

func switchFixture(t *testing.T) string {
	t.Helper()
	return testkit.CC(t, "switch", "-O2", "-g", "-pthread", "../../testdata/switch/switch.c")
}

func switchDPDF(t *testing.T, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "probe.dpdf")
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// runRecords reads run -o's JSON lines.
func runRecords(t *testing.T, path string) []struct {
	Minor int
	Data  string
	Pid   int
} {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []struct {
		Minor int
		Data  string
		Pid   int
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l == "" {
			continue
		}
		var r struct {
			Minor int
			Data  string
			Pid   int
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		out = append(out, r)
	}
	return out
}

// probeRow finds the run summary's row of the probe of that minor at loc
// (its kind's name first, if any): its state, HOW, hits and skipped.
func probeRow(t *testing.T, out string, minor int, loc string) (state, how string, hits, skipped int) {
	t.Helper()
	re := regexp.MustCompile(`(?m)^\S+\s+\S+\s+` + strconv.Itoa(minor) + `\s+(?:\S+ )?` + regexp.QuoteMeta(loc) + `\s+\S+\s+(\S+)\s+(.+?)\s+(\d+)\s+(\d+)\s+\d+\s+\d+\s+\d+\s+\d+`)
	m := re.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no row of %s in\n%s", loc, out)
	}
	hits, _ = strconv.Atoi(m[3])
	skipped, _ = strconv.Atoi(m[4])
	return m[1], m[2], hits, skipped
}

const abcDPDF = `name = %s
modtype = user
vars = 2
offset = a            // A: B on
minor = 1
enable 2
exit 0
offset = b            // B: inserted off
minor = 2
enabled = no
inc lv,0
push r,rdi            // 1 between A and C, 2 after C, 0 before any A
log 1
exit 1
offset = c            // C: B off
minor = 3
disable 2
exit 0
offset = b            // every call of b
minor = 4
inc lv,1
exit 0
`

// B recorded only between A and C, on a process: 4 threads, each round
// (a, 3 b, c, 2 b) under the fixture's mutex; 5 calls of b before any a
// and 5 after the last c. Exact: 4*loops*3 records, every one b(1); B's
// hits the same, nothing skipped. Both
// routes: every probe on a jump pad, and every probe on an int3.
func TestSwitchRun(t *testing.T) {
	prog := switchFixture(t)
	const threads, loops, k, m = 4, 500, 3, 2
	want := threads * loops * k
	all := threads*loops*(k+m) + 10
	for _, route := range []string{"int3", "auto"} {
		t.Run(route, func(t *testing.T) {
			recs := filepath.Join(t.TempDir(), "r.jsonl")
			out, errs, code := gprobes(t, "run", "--route", route, "-o", recs, switchDPDF(t, fmt.Sprintf(abcDPDF, prog)), "--",
				prog, "rounds", fmt.Sprint(threads), fmt.Sprint(loops), fmt.Sprint(k), fmt.Sprint(m))
			if code != 0 {
				t.Fatalf("exit %d\n%s%s", code, out, errs)
			}
			if !strings.Contains(out, fmt.Sprintf("lv 0=%d 1=%d", want, all)) {
				t.Errorf("want lv 0=%d 1=%d in\n%s", want, all, out)
			}
			rs := runRecords(t, recs)
			n := 0
			for _, r := range rs {
				if r.Minor != 2 {
					continue
				}
				n++
				if r.Data != "0100000000000000" {
					t.Fatalf("B recorded b(%s): not between A and C", r.Data)
				}
			}
			if n != want {
				t.Errorf("%d records of B, want %d", n, want)
			}
			// the process ended: its probes are gone, their counts kept
			_, how, hits, skipped := probeRow(t, out, 2, "b")
			if hits != want || skipped != 0 {
				t.Errorf("B: %d hits, %d skipped; want %d, 0\n%s", hits, skipped, want, out)
			}
			for i, loc := range []string{"a", "c"} {
				_, h, hits, _ := probeRow(t, out, 1+2*i, loc)
				if hits != threads*loops || (route == "auto") != (h == "jump") {
					t.Errorf("%s: HOW %q, %d hits; want %d (route %s)", loc, h, hits, threads*loops, route)
				}
			}
			if (route == "auto") != (how == "jump") {
				t.Errorf("B's HOW %q on route %s", how, route)
			}
		})
	}
}

// The same trace on the kernel target: getpid (A), getppid (B) and
// gettid (C) tracepoints, the command's hits only (run --target kernel
// -- CMD filters by its pid), exact counts.
func TestSwitchKernelRun(t *testing.T) {
	needKernelBPF(t)
	prog := switchFixture(t)
	const threads, loops, k, m = 4, 2000, 3, 2
	want := threads * loops * k
	src := `name = vmlinux
modtype = kernel
vars = 2
tracepoint = syscalls:sys_enter_getpid
minor = 1
enable 2
exit 0
tracepoint = syscalls:sys_enter_getppid
minor = 2
enabled = no
inc lv,0
push tid
log 1
exit 1
tracepoint = syscalls:sys_enter_gettid
minor = 3
disable 2
exit 0
tracepoint = syscalls:sys_enter_getppid
minor = 4
inc lv,1
exit 0
`
	recs := filepath.Join(t.TempDir(), "r.jsonl")
	out, errs, code := gprobes(t, "run", "--target", "kernel", "-o", recs, switchDPDF(t, src), "--",
		prog, "syscalls", fmt.Sprint(threads), fmt.Sprint(loops), fmt.Sprint(k), fmt.Sprint(m))
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	all := threads*loops*(k+m) + 10
	if !strings.Contains(out, fmt.Sprintf("lv 0=%d 1=%d", want, all)) {
		t.Errorf("want lv 0=%d 1=%d in\n%s", want, all, out)
	}
	n := 0
	for _, r := range runRecords(t, recs) {
		if r.Minor == 2 {
			n++
		}
	}
	if n != want {
		t.Errorf("%d records of B, want %d", n, want)
	}
	state, _, hits, skipped := probeRow(t, out, 2, "syscalls:sys_enter_getppid")
	if state != "disabled" || hits != want || skipped != 0 {
		t.Errorf("B: %s, %d hits, %d skipped; want disabled, %d, 0\n%s", state, hits, skipped, want, out)
	}
}

// phases drives testdata/switch's phases mode: each call makes every
// thread call b(n) n times.
type phases struct {
	t   *testing.T
	in  io.Writer
	sc  *bufio.Scanner
	pid int
}

func startPhases(t *testing.T, prog string, threads int) *phases {
	t.Helper()
	cmd := exec.Command(prog, "phases", fmt.Sprint(threads))
	in, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "ready ") {
		t.Fatal("the fixture printed no ready line")
	}
	return &phases{t: t, in: in, sc: sc, pid: cmd.Process.Pid}
}

func (p *phases) run(n int) {
	p.t.Helper()
	fmt.Fprintln(p.in, n)
	if !p.sc.Scan() || p.sc.Text() != fmt.Sprint("done ", n) {
		p.t.Fatalf("the fixture said %q after %d", p.sc.Text(), n)
	}
}

type switchProbe struct {
	Target, Module, Location, State, Reason, How string
	Minor                                        int
	Hits, Skipped                                uint64
}

func switchQuery(t *testing.T, sock string) []switchProbe {
	t.Helper()
	var q struct{ Probes []switchProbe }
	if err := json.Unmarshal([]byte(mustRun(t, "query", "--socket", sock, "--all", "--json")), &q); err != nil {
		t.Fatal(err)
	}
	return q.Probes
}

func switchLV(t *testing.T, sock, module string) []string {
	t.Helper()
	var v struct {
		Modules []struct {
			Module string
			LV     []string
		}
	}
	if err := json.Unmarshal([]byte(mustRun(t, "getvars", "--socket", sock, module, "--json")), &v); err != nil || len(v.Modules) != 1 {
		t.Fatalf("getvars: %v %+v", err, v)
	}
	return v.Modules[0].LV
}

// gprobes enable and disable through the daemon on a process it attached
// to, on each route: B inserted off counts nothing (no hit at all) while
// the control probe counts every call; enable --minor 2, then disable of
// the whole module, then enable --minor 4: exact counts after each, and
// query's states and reasons. Threads are new at every phase.
func TestSwitchDaemon(t *testing.T) {
	prog := switchFixture(t)
	const threads = 4
	src := fmt.Sprintf(`name = %s
modtype = user
vars = 2
offset = b
minor = 2
enabled = no
inc lv,0
exit 0
offset = b
minor = 4
inc lv,1
exit 0
`, prog)
	for _, route := range []string{"int3", "auto"} {
		t.Run(route, func(t *testing.T) {
			dir := t.TempDir()
			sock := filepath.Join(dir, "d.sock")
			daemonProcess(t, sock, filepath.Join(dir, "state"), "--route", route)
			ph := startPhases(t, prog, threads)
			mustRun(t, "insert", "--socket", sock, "--target", fmt.Sprintf("pid:%d", ph.pid), switchDPDF(t, src))
			check := func(when string, lv0, lv1 int, states ...string) {
				t.Helper()
				if lv := switchLV(t, sock, prog); lv[0] != fmt.Sprint(lv0) || lv[1] != fmt.Sprint(lv1) {
					t.Fatalf("%s: lv %v, want %d %d", when, lv, lv0, lv1)
				}
				q := switchQuery(t, sock)
				if len(q) != 2 || q[0].Hits != uint64(lv0) || q[0].Skipped != 0 || q[1].Hits != uint64(lv1) {
					t.Fatalf("%s: query %+v", when, q)
				}
				for i, st := range states {
					if q[i].State != st {
						t.Errorf("%s: probe minor %d %s (%s), want %s", when, q[i].Minor, q[i].State, q[i].Reason, st)
					}
					if st == "disabled" && !strings.HasPrefix(q[i].Reason, fmt.Sprintf("switched off: enable %d", q[i].Minor)) {
						t.Errorf("%s: minor %d's reason %q", when, q[i].Minor, q[i].Reason)
					}
					if (route == "auto") != (q[i].How == "jump") {
						t.Errorf("%s: HOW %q on route %s", when, q[i].How, route)
					}
				}
			}
			ph.run(100)
			check("inserted", 0, 400, "disabled", "active")
			if out := mustRun(t, "enable", "--socket", sock, prog, "--minor", "2"); out != "switched on 1 probe\n" {
				t.Errorf("enable said %q", out)
			}
			ph.run(50)
			check("enable --minor 2", 200, 600, "active", "active")
			if out := mustRun(t, "disable", "--socket", sock, prog); out != "switched off 2 probes\n" {
				t.Errorf("disable said %q", out)
			}
			ph.run(30)
			check("disable", 200, 600, "disabled", "disabled")
			mustRun(t, "enable", "--socket", sock, prog, "--minor", "4", "--target", fmt.Sprintf("pid:%d", ph.pid))
			ph.run(10)
			check("enable --minor 4", 200, 640, "disabled", "active")
			if _, errs, code := gprobes(t, "enable", "--socket", sock, prog, "--minor", "9"); code != 1 || !strings.Contains(errs, "no probe with that minor 9") {
				t.Errorf("enable --minor 9: exit %d %s", code, errs)
			}
			if _, errs, code := gprobes(t, "disable", "--socket", sock, "nothing"); code != 1 || !strings.Contains(errs, `no module "nothing" is inserted`) {
				t.Errorf("disable of no module: exit %d %s", code, errs)
			}
			ph.run(10)
			check("after the refusals", 200, 680, "disabled", "active")
		})
	}
}

// gprobes enable and disable of the kernel target through the daemon: B
// on getppid inserted off counts nothing at all (query's hits 0, whoever
// calls getppid meanwhile), this process's calls counted exactly while it
// is on.
func TestSwitchDaemonKernel(t *testing.T) {
	needKernelBPF(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "d.sock")
	daemonProcess(t, sock, filepath.Join(dir, "state"))
	src := fmt.Sprintf(`name = vmlinux
modtype = kernel
vars = 1
tracepoint = syscalls:sys_enter_getppid
minor = 2
enabled = no
push pid
push d,%d
sub
jnz other
inc lv,0
other:
exit 0
`, os.Getpid())
	mustRun(t, "insert", "--socket", sock, "--target", "kernel", switchDPDF(t, src))
	calls := func(n int) {
		for i := 0; i < n; i++ {
			syscall.Getppid()
		}
	}
	calls(1000)
	q := switchQuery(t, sock)
	if lv := switchLV(t, sock, "vmlinux"); lv[0] != "0" || len(q) != 1 || q[0].Hits != 0 || q[0].State != "disabled" || !strings.HasPrefix(q[0].Reason, "switched off: enable 2") {
		t.Fatalf("inserted off: lv %v, query %+v", lv, q)
	}
	if out := mustRun(t, "enable", "--socket", sock, "vmlinux", "--minor", "2", "--target", "kernel"); out != "switched on 1 probe\n" {
		t.Errorf("enable said %q", out)
	}
	calls(3000)
	if lv := switchLV(t, sock, "vmlinux"); lv[0] != "3000" {
		t.Fatalf("switched on: lv %v, want 3000", lv)
	}
	q = switchQuery(t, sock)
	if q[0].State != "active" || q[0].Hits < 3000 {
		t.Errorf("switched on: %+v", q[0])
	}
	mustRun(t, "disable", "--socket", sock, "vmlinux")
	before := switchQuery(t, sock)[0].Hits
	calls(2000)
	if lv := switchLV(t, sock, "vmlinux"); lv[0] != "3000" {
		t.Fatalf("switched off again: lv %v, want 3000", lv)
	}
	if q := switchQuery(t, sock); q[0].Hits != before || q[0].State != "disabled" {
		t.Errorf("switched off again: %d hits (were %d), %s", q[0].Hits, before, q[0].State)
	}
}
