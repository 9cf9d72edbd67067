//go:build linux

package ptrace_test

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/ptrace"
	"github.com/gprobes/gprobes/usdt"
)

// usdtProg builds the host target's USDT test program
// (kernel/testdata/usdtprog.c and usdtguard.c: app:tick and app:more
// plain, app:guarded behind its semaphore).
func usdtProg(t *testing.T) string {
	t.Helper()
	testkit.NeedSDT(t)
	return testkit.CC(t, "usdtprog", "-O1", "../kernel/testdata/usdtprog.c", "../kernel/testdata/usdtguard.c")
}

// usdtRun is a usdtprog process under the engine.
type usdtRun struct {
	t    *testing.T
	eng  *engine.Engine
	pid  int
	in   io.Writer
	out  *bufio.Reader
	mu   sync.Mutex
	recs []engine.Record
}

func (u *usdtRun) options() engine.Options {
	return engine.Options{
		Sink: engine.SinkFunc(func(rec *engine.Record) {
			u.mu.Lock()
			u.recs = append(u.recs, *rec)
			u.mu.Unlock()
		}),
		DumpDir: u.t.TempDir(),
		Warn:    func(msg string) { u.t.Log("engine:", msg) },
	}
}

// startUSDTExec runs usdtprog under the engine from its first
// instruction (exec:).
func startUSDTExec(t *testing.T, exe string) *usdtRun {
	u := &usdtRun{t: t}
	inR, inW, _ := os.Pipe()
	outR, outW, _ := os.Pipe()
	eng, err := engine.Start(ptrace.Exec(exe, []string{exe}, os.Environ(), "", inR, outW, os.Stderr), u.options())
	if err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	u.eng, u.pid, u.in, u.out = eng, eng.Pid(), inW, bufio.NewReader(outR)
	t.Cleanup(func() { eng.Close(); inW.Close(); syscall.Kill(u.pid, syscall.SIGKILL) })
	return u
}

// startUSDTPid starts usdtprog alone; attach puts it under the engine
// (pid:).
func startUSDTPid(t *testing.T, exe string) *usdtRun {
	u := &usdtRun{t: t}
	cmd := exec.Command(exe)
	in, _ := cmd.StdinPipe()
	outp, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	u.pid, u.in, u.out = cmd.Process.Pid, in, bufio.NewReader(outp)
	return u
}

func (u *usdtRun) attach() {
	eng, err := engine.Start(ptrace.Attach(u.pid), u.options())
	if err != nil {
		u.t.Fatal(err)
	}
	u.eng = eng
	u.t.Cleanup(func() { eng.Close() })
}

func (u *usdtRun) ready() {
	if l, err := u.out.ReadString('\n'); err != nil || l != "ready\n" {
		u.t.Fatalf("usdtprog: %q %v", l, err)
	}
}

// rounds runs n rounds and returns how many found app:guarded's
// semaphore set.
func (u *usdtRun) rounds(n int) int {
	u.t.Helper()
	fmt.Fprintf(u.in, "%d\n", n)
	l, err := u.out.ReadString('\n')
	var got, enabled int
	if err != nil || func() bool { _, e := fmt.Sscanf(l, "done %d enabled %d", &got, &enabled); return e != nil }() || got != n {
		u.t.Fatalf("usdtprog after %d rounds: %q %v", n, l, err)
	}
	return enabled
}

// words are the records of one minor, as 64-bit words.
func (u *usdtRun) words(minor uint16) [][]int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out [][]int64
	for _, r := range u.recs {
		if r.Minor != minor {
			continue
		}
		var w []int64
		for b := r.Data; len(b) >= 8; b = b[8:] {
			w = append(w, int64(binary.LittleEndian.Uint64(b)))
		}
		out = append(out, w)
	}
	return out
}

// semaphore reads app:guarded's semaphore in the process (the symbol
// app_guarded_semaphore, at its address plus the load bias of the
// executable, a PIE).
func (u *usdtRun) semaphore(exe string) uint16 {
	u.t.Helper()
	out, err := exec.Command("nm", exe).Output()
	if err != nil {
		u.t.Fatal(err)
	}
	var sym uint64
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[2] == "app_guarded_semaphore" {
			fmt.Sscanf(f[0], "%x", &sym)
		}
	}
	maps, err := ptrace.Maps(u.pid)
	if err != nil || sym == 0 {
		u.t.Fatalf("semaphore symbol %#x, maps: %v", sym, err)
	}
	base := ^uint64(0)
	for _, m := range maps {
		if m.Path == exe && m.Start < base {
			base = m.Start
		}
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", u.pid))
	if err != nil {
		u.t.Fatal(err)
	}
	defer f.Close()
	var b [2]byte
	if _, err := f.ReadAt(b[:], int64(base+sym)); err != nil {
		u.t.Fatal(err)
	}
	return binary.LittleEndian.Uint16(b[:])
}

const usdtProbes = `name = PROGRAM
modtype = user
vars = 2
usdt = app:tick
minor = 1
inc lv,0
push arg,1
push arg,2
log 2
exit 1
usdt = app:guarded
minor = 2
inc lv,1
push arg,1
log 1
exit 1
usdt = app:more
minor = 4
push arg,1
push arg,2
push arg,3
log 3
exit 1
usdt = app:nosuch
minor = 5
exit 0
`

// TestUSDTProcess: usdt = PROVIDER:NAME on a process, run from its start
// (exec:) and attached while running (pid:): every hit of the site
// counted, push arg,N read where the site's note says (registers of 8,
// 4 and 2 bytes sign-extended, 8 bytes of stack memory), app:guarded's
// semaphore counted up at insert (the program computes its arguments)
// and back to 0 at remove and at detach; a name the file lacks is
// refused naming those it has; a probe reading its arguments runs on
// the int3 route, its how saying why not in a jump pad.
func TestUSDTProcess(t *testing.T) {
	exe := usdtProg(t)
	for _, mode := range []string{"exec", "pid"} {
		t.Run(mode, func(t *testing.T) {
			var u *usdtRun
			if mode == "exec" {
				u = startUSDTExec(t, exe)
			} else {
				u = startUSDTPid(t, exe)
				u.ready()
				if e := u.rounds(3); e != 0 {
					t.Fatalf("app:guarded enabled in %d rounds before any probe", e)
				}
				u.attach()
			}
			infos, err := u.eng.Insert(compileFor(t, exe, usdtProbes), engine.InsertNew)
			if err != nil || len(infos) != 4 {
				t.Fatalf("insert: %+v %v", infos, err)
			}
			u.eng.Release()
			if mode == "exec" {
				u.ready()
			}
			for _, i := range infos[:3] {
				if i.State != engine.StateActive || !strings.HasPrefix(i.How, "int3 ") || !strings.Contains(i.How, "push arg: a usdt probe's arguments are read on the int3 route") {
					t.Errorf("%s: %s %q %s", i.Location, i.State, i.How, i.Reason)
				}
			}
			if i := infos[3]; i.State != engine.StateRefused || !strings.Contains(i.Reason, "has no such static probe (it has app:tick, app:more, app:guarded)") {
				t.Errorf("app:nosuch: %s %s", i.State, i.Reason)
			}
			if s := u.semaphore(exe); s != 1 {
				t.Errorf("app:guarded's semaphore is %d with its probe in, want 1", s)
			}
			const n = 10
			if e := u.rounds(n); e != n {
				t.Fatalf("app:guarded enabled in %d of %d rounds with its probe in", e, n)
			}
			tick, more, guarded := u.words(1), u.words(4), u.words(2)
			if len(tick) != n || len(more) != n || len(guarded) != n {
				t.Fatalf("records: app:tick %d, app:more %d, app:guarded %d, want %d each", len(tick), len(more), len(guarded), n)
			}
			for i := int64(0); i < n; i++ {
				if w := tick[i]; len(w) != 2 || w[0] != i || w[1] != -i {
					t.Errorf("app:tick round %d: %v, want [%d %d]", i, w, i, -i)
				}
				if w := more[i]; len(w) != 3 || w[0] != -i || w[1] != i-2 || w[2] != 5*i {
					t.Errorf("app:more round %d: %v, want [%d %d %d] (int, short sign-extended; stack memory)", i, w, -i, i-2, 5*i)
				}
				if w := guarded[i]; len(w) != 1 || w[0] != 3*i {
					t.Errorf("app:guarded round %d: %v, want [%d]", i, w, 3*i)
				}
			}
			for _, q := range u.eng.Query() {
				want := map[uint16]uint64{1: n, 2: n, 4: n, 5: 0}[q.Minor]
				if q.Hits != want {
					t.Errorf("query: %s (minor %d) has %d hits, want %d", q.Location, q.Minor, q.Hits, want)
				}
			}
			// remove app:guarded: the semaphore back to 0, the program
			// skips it
			if k, err := u.eng.Remove(exe, []uint16{2}); err != nil || k != 1 {
				t.Fatalf("remove minor 2: %d %v", k, err)
			}
			if s := u.semaphore(exe); s != 0 {
				t.Errorf("app:guarded's semaphore is %d after remove, want 0", s)
			}
			if e := u.rounds(4); e != 0 {
				t.Errorf("app:guarded enabled in %d rounds after remove", e)
			}
			if got := len(u.words(1)); got != n+4 {
				t.Errorf("app:tick: %d records after %d rounds", got, n+4)
			}
			// in again, then the engine detaches with it in: 0 again
			if infos, err := u.eng.Insert(compileFor(t, exe, `name = PROGRAM
modtype = user
usdt = app:guarded
minor = 6
exit 0
`), engine.InsertMerge); err != nil || infos[0].State != engine.StateActive {
				t.Fatalf("insert app:guarded again: %+v %v", infos, err)
			}
			if e := u.rounds(2); e != 2 {
				t.Errorf("app:guarded enabled in %d of 2 rounds, in again", e)
			}
			if mode == "exec" {
				return // gprobes' own child ends with it
			}
			if _, err := u.eng.Close(); err != nil {
				t.Fatal(err)
			}
			if s := u.semaphore(exe); s != 0 {
				t.Errorf("app:guarded's semaphore is %d after detach, want 0", s)
			}
			if e := u.rounds(3); e != 0 {
				t.Errorf("app:guarded enabled in %d rounds after detach", e)
			}
		})
	}
}

// TestUSDTSitesFork: app:twice has two sites (an inlined function
// called twice) behind one semaphore: a usdt probe goes on both, query
// shows one probe with the hits of both, push arg reads each site's
// argument; the forked child inherits the probes and the semaphore
// counted up, its hits counted too. A probe without push arg runs in the
// jump pads, one reading its argument on the int3 route.
func TestUSDTSitesFork(t *testing.T) {
	usdtProg(t) // sys/sdt.h is here
	exe := testkit.CC(t, "usdtsites", "-O1", "../testdata/proc/usdtsites.c")
	const n = 25
	t.Run("args", func(t *testing.T) {
		r := startWith(t, startConfig{path: exe, route: engine.RouteAuto}, fmt.Sprint(n))
		infos := r.insert(compileFor(t, exe, `name = PROGRAM
modtype = user
usdt = app:twice
minor = 1
push arg,1
log 1
exit 1
`))
		if i := infos[0]; i.State != engine.StateActive || !strings.HasPrefix(i.How, "int3 ") || !strings.HasSuffix(i.How, "(2 sites)") {
			t.Errorf("minor 1: %s %q %s", i.State, i.How, i.Reason)
		}
		r.eng.Release()
		checkTwice(t, r, n)
		byPid := map[int][]uint64{}
		for _, rec := range r.records(1) {
			if rec.Kind != "log" || len(rec.Data) != 8 {
				t.Fatalf("record %+v, want a log of one word", rec)
			}
			byPid[rec.Pid] = append(byPid[rec.Pid], binary.LittleEndian.Uint64(rec.Data))
		}
		if len(byPid) != 2 {
			t.Fatalf("records from %d processes, want 2 (parent, child): %v", len(byPid), byPid)
		}
		for pid, vs := range byPid {
			var want []uint64
			for i := uint64(0); i < n; i++ {
				want = append(want, i, 100*i)
			}
			if fmt.Sprint(vs) != fmt.Sprint(want) {
				t.Errorf("process %d: arguments %v, want %v", pid, vs, want)
			}
		}
	})
	t.Run("pads", func(t *testing.T) {
		r := startWith(t, startConfig{path: exe, route: engine.RouteAuto}, fmt.Sprint(n))
		infos := r.insert(compileFor(t, exe, `name = PROGRAM
modtype = user
vars = 1
usdt = app:twice
minor = 2
inc lv,0
exit 0
`))
		if i := infos[0]; i.State != engine.StateActive || i.How != "jump (2 sites)" {
			t.Errorf("minor 2: %s %q %s", i.State, i.How, i.Reason)
		}
		r.eng.Release()
		checkTwice(t, r, n)
		lv, _, err := r.eng.Vars(exe, false)
		if err != nil || lv[0] != 4*n {
			t.Errorf("the pads counted %v hits, want %d (%v)", lv, 4*n, err)
		}
	})
}

// checkTwice waits for usdtsites to end: each process found the
// semaphore set at both sites in every round, and query counts the hits
// of both sites in both processes.
func checkTwice(t *testing.T, r *run, n int) {
	t.Helper()
	lines := r.finish()
	if got := strings.Join(sorted(lines), "|"); got != fmt.Sprintf("child enabled %d|parent enabled %d", 2*n, 2*n) {
		t.Errorf("output %q", lines)
	}
	for _, q := range r.eng.Query() {
		if q.Hits != uint64(4*n) {
			t.Errorf("query: minor %d has %d hits, want %d", q.Minor, q.Hits, 4*n)
		}
	}
}

// TestUSDTDlclose: a usdt probe on a library's site behind a semaphore
// goes in each time the library is dlopen'ed (the semaphore counted up
// in the fresh mapping, every call enabled and hit) and is forgotten with
// it at dlclose: a detach while the library is not mapped writes nothing
// and reports no error.
func TestUSDTDlclose(t *testing.T) {
	usdtProg(t) // sys/sdt.h is here
	lib := testkit.CC(t, "libusdtlib.so", "-O1", "-shared", "-fPIC", "../testdata/proc/usdtlib.c")
	exe := testkit.CC(t, "usdtdl", "-O1", "../testdata/proc/usdtdl.c", "-ldl")
	u := &usdtRun{t: t}
	inR, inW, _ := os.Pipe()
	outR, outW, _ := os.Pipe()
	eng, err := engine.Start(ptrace.Exec(exe, []string{exe, lib}, os.Environ(), "", inR, outW, os.Stderr), u.options())
	if err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	u.eng, u.pid, u.in, u.out = eng, eng.Pid(), inW, bufio.NewReader(outR)
	t.Cleanup(func() { eng.Close(); inW.Close(); syscall.Kill(u.pid, syscall.SIGKILL) })
	infos, err := eng.Insert(compileFor(t, lib, `name = PROGRAM
modtype = user
usdt = lib:call
minor = 1
push arg,1
log 1
exit 1
`), engine.InsertNew)
	if err != nil || infos[0].State != engine.StatePending {
		t.Fatalf("insert before the dlopen: %+v %v", infos, err)
	}
	eng.Release()
	u.ready()
	for round, n := range []int{3, 5} {
		if e := u.rounds(n); e != n {
			t.Fatalf("dlopen %d: lib:call enabled in %d of %d calls", round+1, e, n)
		}
	}
	if got := len(u.words(1)); got != 8 {
		t.Errorf("%d records, want 8", got)
	}
	// the library is not mapped now: the probe is pending, and a detach
	// writes nothing where the semaphore was
	if q := eng.Query(); len(q) != 1 || q[0].State != engine.StatePending {
		t.Errorf("after dlclose: %+v", q)
	}
	if _, err := eng.Close(); err != nil {
		t.Errorf("detach with the library unmapped: %v", err)
	}
}

// TestUSDTPython: python3's own python:audit (semaphore-guarded, its
// event name a string pointer in a register) on a running python3
// (pid:): each os.listdir the script makes after the insert is one
// "os.listdir" event read with push arg,1 and log str.
func TestUSDTPython(t *testing.T) {
	py, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		testkit.SkipOrFail(t, "no /usr/bin/python3")
	}
	if _, all, err := usdt.Sites(py, "", ""); err != nil || !strings.Contains(strings.Join(all, " "), "python:audit") {
		testkit.SkipOrFail(t, "%s has no python:audit static probe (%v)", py, err)
	}
	cmd := exec.Command(py, "-u", "-c", `import os, sys
print("ready")
for line in sys.stdin:
    for _ in range(int(line)):
        os.listdir("/")
    print("done", int(line))
`)
	in, _ := cmd.StdinPipe()
	outp, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	u := &usdtRun{t: t, pid: cmd.Process.Pid, in: in, out: bufio.NewReader(outp)}
	u.ready()
	u.attach()
	infos, err := u.eng.Insert(compileFor(t, py, "name = PROGRAM\nmodtype = user\nusdt = python:audit\nminor = 1\npush d,64\npush arg,1\nlog str\nexit 1\n"), engine.InsertNew)
	if err != nil || infos[0].State != engine.StateActive {
		t.Fatalf("insert: %+v %v", infos, err)
	}
	u.eng.Release()
	fmt.Fprintln(u.in, 7)
	if l, err := u.out.ReadString('\n'); err != nil || l != "done 7\n" {
		t.Fatalf("python3: %q %v", l, err)
	}
	u.mu.Lock()
	n := 0
	var names []string
	for _, r := range u.recs {
		names = append(names, string(r.Data))
		if string(r.Data) == "os.listdir" {
			n++
		}
	}
	u.mu.Unlock()
	if n != 7 {
		t.Errorf("%d os.listdir events, want 7: %q", n, names)
	}
}
