package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gprobes/gprobes/internal/testkit"
)

// tableRow is the row (its fields) of the probe of that minor in a query
// or run table.
func tableRow(t *testing.T, table string, minor int) []string {
	t.Helper()
	var head []string
	for _, l := range strings.Split(table, "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && f[0] == "TARGET" {
			head = f
			continue
		}
		if head == nil || len(f) < 3 {
			continue
		}
		for i, h := range head {
			if h == "MINOR" && i < len(f) && f[i] == fmt.Sprint(minor) {
				return f
			}
		}
	}
	t.Fatalf("no probe of minor %d in:\n%s", minor, table)
	return nil
}

// One probe's push d, of a symbol the file lacks refuses that probe
// alone: the module's other probe goes in and counts its hits. Before,
// every probe of the module was refused with that probe's reason.
func TestUnknownSymbolRefusesItsProbeAlone(t *testing.T) {
	hits := buildHits(t)
	probe := filepath.Join(t.TempDir(), "p.dpdf")
	os.WriteFile(probe, []byte(fmt.Sprintf(`name = %s
modtype = user
vars = 2
offset = probed
minor = 1
inc lv,0
exit 0
offset = f_push
minor = 2
push d,no_such_symbol
inc lv,1
exit 0
`, hits)), 0o644)
	out, errs, code := gprobes(t, "run", probe, "--", hits, "-n", "7")
	if code != 0 {
		t.Fatalf("run: exit %d\n%s%s", code, out, errs)
	}
	if !strings.Contains(out, "lv 0=7 1=0") {
		t.Errorf("want probe 1's 7 hits in lv 0:\n%s", out)
	}
	if r := tableRow(t, out, 1); r[5] != "gone" || r[7] != "7" {
		t.Errorf("probe 1: %v, want gone (in until the exit) with 7 hits", r)
	}
	if r := strings.Join(tableRow(t, out, 2), " "); !strings.Contains(r, "refused") || !strings.Contains(r, `push d,no_such_symbol: symbol "no_such_symbol" not found in `+hits) {
		t.Errorf("probe 2: %s", r)
	}
	if !strings.Contains(errs, "probe f_push (minor 2) refused") || strings.Contains(errs, "minor 1") {
		t.Errorf("run's refusals: %s", errs)
	}
}

// The same on the kernel target: the tracepoint whose program names a
// symbol the kernel lacks is refused alone, and /proc/kallsyms is named
// once in the reason. Before, both probes were refused and the reason
// said "/proc/kallsyms, /proc/kallsyms (the modules)".
func TestUnknownSymbolRefusesItsProbeAloneKernel(t *testing.T) {
	needKernelBPF(t)
	probe := filepath.Join(t.TempDir(), "k.dpdf")
	os.WriteFile(probe, []byte(`name = vmlinux
modtype = kernel
vars = 2
tracepoint = syscalls:sys_enter_exit_group
minor = 1
inc lv,0
exit 0
tracepoint = syscalls:sys_enter_exit_group
minor = 2
push d,no_such_symbol
inc lv,1
exit 0
`), 0o644)
	out, errs, code := gprobes(t, "run", "--target", "kernel", probe, "--", "true")
	if code != 0 {
		t.Fatalf("run: exit %d\n%s%s", code, out, errs)
	}
	if !strings.Contains(out, "lv 0=1 1=0") {
		t.Errorf("want the command's one exit_group in lv 0:\n%s", out)
	}
	r2 := strings.Join(tableRow(t, out, 2), " ")
	if !strings.Contains(r2, "refused") || !strings.Contains(r2, `symbol "no_such_symbol" not found in /proc/kallsyms`) {
		t.Errorf("probe 2: %s", r2)
	}
	if strings.Count(r2, "/proc/kallsyms,") > 0 || strings.Contains(r2, "(the modules)") {
		t.Errorf("probe 2's reason names kallsyms twice: %s", r2)
	}
	if r1 := strings.Join(tableRow(t, out, 1), " "); strings.Contains(r1, "refused") {
		t.Errorf("probe 1 refused for probe 2's symbol: %s", r1)
	}
}

// The daemon's commands as a newcomer types them: query and getvars with
// no module mean every module; getvars --reset prints the local and the
// global variables as they were before the reset; an error names its
// command once; log NAME prints NAME's records only.
func TestDaemonCommandsPlain(t *testing.T) {
	hits := buildHits(t)
	dir := t.TempDir()
	sock, state := filepath.Join(dir, "d.sock"), filepath.Join(dir, "state")
	// the int3 route: a hit and getvars' read are done by the same
	// engine thread, so lv and gv are read at one moment
	daemonProcess(t, sock, state, "--route", "int3")
	target, lines := startLooping(t, hits)
	pid := fmt.Sprintf("pid:%d", target.Process.Pid)
	// two modules on the same file, by its path and by its base name: the
	// first counts calls of f_push in lv 0 and gv 0
	mustRun(t, "insert", "--socket", sock, "--target", pid, "-e",
		fmt.Sprintf("name = %s; modtype = user; vars = 1; gvars = 1; offset = f_push; minor = 1; inc lv,0; inc gv,0; push d,1; log 1; exit 1", hits))
	mustRun(t, "insert", "--socket", sock, "--target", pid, "-e",
		fmt.Sprintf("name = %s; modtype = user; vars = 1; offset = f_push; minor = 2; inc lv,0; push d,2; log 1; exit 1", filepath.Base(hits)))
	roundLine(t, lines)
	roundLine(t, lines)
	// query and getvars without a module: all of them
	out := mustRun(t, "query", "--socket", sock)
	if strings.Count(out, pid) != 2 {
		t.Errorf("query with no module: want both modules' probes:\n%s", out)
	}
	out = mustRun(t, "getvars", "--socket", sock)
	if !strings.Contains(out, hits+": lv 0=") || !strings.Contains(out, filepath.Base(hits)+": lv 0=") || !strings.Contains(out, "gv: 0=") {
		t.Errorf("getvars with no module: want both modules' lv and gv:\n%s", out)
	}
	// --reset: lv 0 and gv 0 count the same calls, read at one moment
	// before the reset, so they are equal and not 0
	var lv, gv uint64
	out = mustRun(t, "getvars", "--socket", sock, "--reset", hits)
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, pid+" "+hits+": "):
			fmt.Sscanf(strings.TrimPrefix(l, pid+" "+hits+": "), "lv 0=%d", &lv)
		case strings.HasPrefix(l, "gv: "):
			fmt.Sscanf(l, "gv: 0=%d", &gv)
		}
	}
	if lv == 0 || gv != lv {
		t.Errorf("getvars --reset: lv 0=%d, gv 0=%d: want them equal and not 0 (both before the reset)\n%s", lv, gv, out)
	}
	// an unknown module: the command named once
	_, errs, code := gprobes(t, "getvars", "--socket", sock, "nosuch")
	if code != 1 || strings.Count(errs, "getvars:") != 1 || !strings.Contains(errs, `no module "nosuch" is inserted`) {
		t.Errorf("getvars nosuch: exit %d %q", code, errs)
	}
	_, errs, _ = gprobes(t, "query", "--socket", sock, "nosuch")
	if strings.Count(errs, "query:") != 1 {
		t.Errorf("query nosuch: %q", errs)
	}
	// log NAME: that module's records only
	all := mustRun(t, "log", "--socket", sock)
	one := mustRun(t, "log", "--socket", sock, filepath.Base(hits))
	n1 := strings.Count(one, " "+filepath.Base(hits)+"(0,2) ")
	if n1 == 0 || n1 != strings.Count(one, "\n") || strings.Contains(one, hits+"(0,1)") || !strings.Contains(all, hits+"(0,1)") {
		t.Errorf("log %s: %d of its records in %d lines; the whole log has the other module's: %v\n%s", filepath.Base(hits), n1, strings.Count(one, "\n"), strings.Contains(all, hits+"(0,1)"), one)
	}
	mustRun(t, "remove", "--socket", sock, "--all")
}

// run --target kernel -- COMMAND probes COMMAND and every process it
// starts, as the process target follows forks: the fixture's three
// generations (1 + 3 children + 3 grandchildren, each with a second
// thread) make exactly 7 × 2 × 50 getppid calls, every one counted and no
// other process's (this test's own calls, made while it runs, are not).
// Before, only the first process's 100 were.
func TestRunKernelFollowsChildren(t *testing.T) {
	needKernelBPF(t)
	tree := testkit.CC(t, "forktree", "-O1", "-pthread", "../../testdata/kernel/forktree.c")
	probe := filepath.Join(t.TempDir(), "k.dpdf")
	os.WriteFile(probe, []byte(`name = vmlinux
modtype = kernel
vars = 1
tracepoint = syscalls:sys_enter_getppid
inc lv,0
push pid
log 1
exit 1
`), 0o644)
	stop := make(chan bool)
	go func() { // another process's calls, while the command runs
		for {
			select {
			case <-stop:
				return
			default:
				syscall.Getppid()
			}
		}
	}()
	// in a process of its own: the command's output goes to gprobes'
	out, errs, code := gprobesStdin(t, "", "run", "--target", "kernel", "--json", probe, "--", tree, "-c", "3", "-n", "50")
	close(stop)
	if code != 0 {
		t.Fatalf("run: exit %d\n%s%s", code, out, errs)
	}
	want := map[int]bool{} // the processes, as they said
	counted := map[int]int{}
	for _, l := range strings.Split(out, "\n") {
		var pid int
		if _, err := fmt.Sscanf(l, "pid %d", &pid); err == nil {
			want[pid] = true
		}
		var rec struct{ Pid int }
		if strings.HasPrefix(l, "{") && json.Unmarshal([]byte(l), &rec) == nil {
			counted[rec.Pid]++
		}
	}
	if len(want) != 7 {
		t.Fatalf("the fixture said %d pids, want 7:\n%s", len(want), out)
	}
	for pid := range want {
		if counted[pid] != 100 {
			t.Errorf("process %d: %d records, want 100 (50 calls from each of its 2 threads)", pid, counted[pid])
		}
	}
	for pid, n := range counted {
		if !want[pid] {
			t.Errorf("%d records of process %d, not of the command's tree", n, pid)
		}
	}
	if !strings.Contains(out, "lv 0=700") {
		t.Errorf("want lv 0=700:\n%s", out)
	}
}

// insert --target exec:./prog through the daemon finds ./prog in the
// client's working directory, and runs it there. Before, the daemon
// looked in its own directory: "exec: ./hits: no such file".
func TestInsertExecRelative(t *testing.T) {
	hits := buildHits(t)
	sock, _ := startDaemon(t) // in this test's directory (cmd/gprobes)
	dir := t.TempDir()
	data, err := os.ReadFile(hits)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prog"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	// -l: it loops until killed
	t.Chdir(dir)
	out := mustRun(t, "insert", "--socket", sock, "--target", "exec:./prog -n 3 -l -p 20", "--json",
		"-e", "name = prog; modtype = user; vars = 1; offset = probed; inc lv,0")
	var resp struct{ Target string }
	if err := json.Unmarshal([]byte(out), &resp); err != nil || !strings.HasPrefix(resp.Target, "pid:") {
		t.Fatalf("insert: %v %s", err, out)
	}
	pid := strings.TrimPrefix(resp.Target, "pid:")
	t.Cleanup(func() {
		if n, err := strconv.Atoi(pid); err == nil {
			syscall.Kill(n, syscall.SIGKILL)
		}
	})
	// it runs in the client's directory
	if cwd, err := os.Readlink("/proc/" + pid + "/cwd"); err != nil || cwd != dir {
		t.Errorf("the program's directory: %q (%v), want %s", cwd, err, dir)
	}
	if exe, err := os.Readlink("/proc/" + pid + "/exe"); err != nil || exe != filepath.Join(dir, "prog") {
		t.Errorf("the program: %q (%v), want %s", exe, err, filepath.Join(dir, "prog"))
	}
}

// After Ctrl-C, run --target pid:N's table says the probes were taken out
// and the process runs on: it is true once run is done. Before, it said
// "active".
func TestRunInterruptedSaysRemoved(t *testing.T) {
	hits := buildHits(t)
	target, lines := startLooping(t, hits)
	pid := fmt.Sprintf("pid:%d", target.Process.Pid)
	exe, _ := os.Executable()
	r := exec.Command(exe, "run", "--target", pid, "-e",
		fmt.Sprintf("name = %s; modtype = user; offset = f_push; minor = 1; exit 0; offset = f_step; minor = 2; enabled = no; exit 0", hits))
	r.Env = append(os.Environ(), "GPROBES_TEST_MAIN=1")
	var rout lockedBuffer
	r.Stdout, r.Stderr = &rout, &rout
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return strings.Contains(rout.String(), "gprobes: ready on "+pid) }, "run's ready line")
	roundLine(t, lines)
	roundLine(t, lines) // a whole round with the probe in
	r.Process.Signal(syscall.SIGINT)
	if err := r.Wait(); err != nil {
		t.Fatalf("run after Ctrl-C: %v\n%s", err, rout.String())
	}
	out := rout.String()
	want := "taken out at SIGINT; " + pid + " runs on without it"
	if r := strings.Join(tableRow(t, out, 1), " "); !strings.Contains(r, " removed ") || !strings.HasSuffix(r, want) || strings.Contains(r, " active ") {
		t.Errorf("probe 1 after Ctrl-C: %s\nwant removed, %q", r, want)
	}
	if r := strings.Join(tableRow(t, out, 2), " "); !strings.Contains(r, " removed ") || !strings.HasSuffix(r, want+" (it was disabled)") {
		t.Errorf("probe 2 (enabled = no) after Ctrl-C: %s", r)
	}
	roundLine(t, lines) // it runs on
}

// query's table has HOW's short form, "int3 ret", and -v and --json say
// why: "int3 ret: entry and 1 return: a return probe on it reads instance
// variables or sets maxactive: its calls are tracked from the entry, on
// the int3 route" (maxactive given: a return probe that needs nothing
// from the entry runs in jump pads, "jump ret"). Before, the table's HOW
// carried the whole sentence, and the table was about 230 columns wide.
func TestQueryHowShort(t *testing.T) {
	hits := buildHits(t)
	sock, _ := startDaemon(t)
	target, lines := startLooping(t, hits)
	pid := fmt.Sprintf("pid:%d", target.Process.Pid)
	mustRun(t, "insert", "--socket", sock, "--target", pid, "-e",
		fmt.Sprintf("name = %s; modtype = user; vars = 1; retprobe = probed; minor = 1; maxactive = 8; inc lv,0; exit 0", hits))
	roundLine(t, lines)
	out := mustRun(t, "query", "--socket", sock)
	row := tableRow(t, out, 1)
	if how := strings.Join(row[7:9], " "); how != "int3 ret" { // LOCATION is two words

		t.Errorf("HOW %q, want int3 ret:\n%s", how, out)
	}
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimRight(l, " "); len(l) > 130+len(hits) { // the module's name is the fixture's path
			t.Errorf("a line of %d columns: %q", len(l), l)
		}
	}
	if !strings.Contains(out, "(-v says why 1 probe runs as HOW says)") {
		t.Errorf("no hint of -v:\n%s", out)
	}
	v := mustRun(t, "query", "--socket", sock, "-v")
	var q struct{ Probes []struct{ How string } }
	if err := json.Unmarshal([]byte(mustRun(t, "query", "--socket", sock, "--json")), &q); err != nil || len(q.Probes) != 1 {
		t.Fatalf("query --json: %v %+v", err, q)
	}
	why := q.Probes[0].How
	if !strings.HasPrefix(why, "int3 ret: entry and 1 return: a return probe on it reads instance variables or sets maxactive") || !strings.Contains(v, "  how      "+why+"\n") || !strings.Contains(v, pid+" "+hits+" minor 1 retprobe probed\n") {
		t.Errorf("query -v:\n%s\nwant how %q", v, why)
	}
}

// A SIGINT or SIGTERM that comes while run gets ready (here: while it
// reads its DPDF from a FIFO) ends run before it attaches, saying so,
// with the shell's status for the signal; the target is left alone. Run
// as a shell runs a background job (SIGINT ignored at its start), the
// SIGINT was lost before: run went on to insert its probes and ran until
// its target ended (the Xen lab's gdbsx test saw that as a ^C with no
// effect). With SIGTERM, it ended run by the signal's default action,
// halfway through whatever it was doing.
func TestRunSignalWhileGettingReady(t *testing.T) {
	hits := buildHits(t)
	target, lines := startLooping(t, hits)
	pid := fmt.Sprintf("pid:%d", target.Process.Pid)
	exe, _ := os.Executable()
	for _, tc := range []struct {
		name  string
		sig   syscall.Signal
		trap  string // the shell's trap before it execs gprobes
		want  int
		words string
	}{
		{"SIGINT ignored at start", syscall.SIGINT, `trap "" INT;`, 130, "SIGINT"},
		{"SIGTERM", syscall.SIGTERM, "", 143, "SIGTERM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fifo := filepath.Join(t.TempDir(), "probe.dpdf")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			r := exec.Command("sh", "-c", tc.trap+` exec "$0" "$@"`, exe, "run", "--target", pid, fifo)
			r.Env = append(os.Environ(), "GPROBES_TEST_MAIN=1")
			var rout lockedBuffer
			r.Stdout, r.Stderr = &rout, &rout
			if err := r.Start(); err != nil {
				t.Fatal(err)
			}
			ended := make(chan error, 1)
			go func() { ended <- r.Wait() }()
			t.Cleanup(func() { r.Process.Kill(); <-ended })
			// the FIFO opens for writing once gprobes has it open to read
			var w *os.File
			testkit.Wait(t, time.Minute, "gprobes to open its DPDF (a FIFO)", func() (bool, string) {
				var err error
				w, err = os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
				return err == nil, fmt.Sprint(err, "; ", rout.String())
			})
			r.Process.Signal(tc.sig)
			fmt.Fprintf(w, "name = %s\nmodtype = user\noffset = f_push\nexit 0\n", hits)
			w.Close()
			select {
			case err := <-ended:
				ended <- err
				code := -1
				if ee, ok := err.(*exec.ExitError); ok {
					code = ee.ExitCode()
				} else if err == nil {
					code = 0
				}
				// Go hands a caught signal to its channel from a goroutine
				// of its own, so run may have gone on to attach before it
				// saw the signal: then the probes came out at once
				out := rout.String()
				before := strings.Contains(out, "gprobes: "+tc.words+" before attaching to "+pid+": nothing was done")
				row := ""
				if strings.Contains(out, "gprobes: ready on "+pid) {
					row = strings.Join(tableRow(t, out, 0), " ")
				}
				switch {
				case before && code == tc.want && !strings.Contains(out, "ready on"):
					t.Logf("%s: seen before attaching", tc.words)
				case !before && code == 0 && strings.Contains(row, " removed ") && strings.HasSuffix(row, "taken out at "+tc.words+"; "+pid+" runs on without it"):
					t.Logf("%s: seen once the probes were in: taken out at once", tc.words)
				default:
					t.Errorf("run given %s as it read its DPDF: %v (status %d; want %d with nothing done, or 0 with the probe taken out)\n%s", tc.words, err, code, tc.want, out)
				}
			case <-time.After(time.Minute):
				t.Errorf("run given %s as it read its DPDF has not ended after a minute:\n%s", tc.words, rout.String())
			}
			roundLine(t, lines) // the target runs on
		})
	}
}

// Short names, as bpftrace and the C linker have them: "libc" is the
// process's libc.so.6, and query says which file; "libgpplug", not mapped
// yet, is pending with what it waits for and where the file is on this
// host, until the process dlopens libgpplug.so.1 and the probe goes in.
// Before, "libc" stayed pending for ever with an empty REASON.
func TestShortNames(t *testing.T) {
	hits := buildHits(t)
	plug := testkit.CC(t, "libgpplug.so.1", "-O1", "-g", "-shared", "-fPIC", "../../testdata/proc/plug.c")
	sock, _ := startDaemon(t)
	cmd := exec.Command(hits, "-n", "5", "-w", "-l", "-p", "20", "-d", plug)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	lines.Scan() // its pid: it waits for a line now
	pid := fmt.Sprintf("pid:%d", cmd.Process.Pid)
	mustRun(t, "insert", "--socket", sock, "--target", pid, "-e", "name = libc; modtype = user; vars = 1; offset = strlen; minor = 1; inc lv,0")
	mustRun(t, "insert", "--socket", sock, "--target", pid, "-e", "name = libgpplug; modtype = user; vars = 1; offset = plug; minor = 2; inc lv,0")
	var q struct {
		Probes []struct {
			Module, File, Reason string
			State                string
		}
	}
	query := func() {
		t.Helper()
		q.Probes = nil
		if err := json.Unmarshal([]byte(mustRun(t, "query", "--socket", sock, "--json")), &q); err != nil || len(q.Probes) != 2 {
			t.Fatalf("query: %v %+v", err, q)
		}
	}
	query()
	// the oracle of libc's file: the process's own maps
	maps, _ := os.ReadFile("/proc/" + strings.TrimPrefix(pid, "pid:") + "/maps")
	var mappedLibc string
	for _, l := range strings.Split(string(maps), "\n") {
		if f := strings.Fields(l); len(f) == 6 && strings.HasPrefix(filepath.Base(f[5]), "libc.so.") {
			mappedLibc = f[5]
		}
	}
	for _, p := range q.Probes {
		switch p.Module {
		case "libc":
			if p.State != "active" || p.File != mappedLibc || mappedLibc == "" {
				t.Errorf("libc: %s, file %q (%s), want active in %s", p.State, p.File, p.Reason, mappedLibc)
			}
		case "libgpplug":
			want := fmt.Sprintf("waiting for libgpplug (libgpplug.so or libgpplug.so.VERSION) to be mapped in process %s (dlopen, exec)", strings.TrimPrefix(pid, "pid:"))
			if p.State != "pending" || !strings.HasPrefix(p.Reason, want) {
				t.Errorf("libgpplug: %s %q, want pending: %s", p.State, p.Reason, want)
			}
		}
	}
	out := mustRun(t, "query", "--socket", sock)
	if !strings.Contains(out, "file: "+pid+" libc is "+mappedLibc+"\n") {
		t.Errorf("query does not say libc's file:\n%s", out)
	}
	fmt.Fprintln(stdin) // go: a round, then the dlopen
	deadline := time.Now().Add(time.Minute)
	for {
		query()
		p := q.Probes[1]
		if p.Module != "libgpplug" {
			p = q.Probes[0]
		}
		if p.State == "active" {
			if p.File != plug {
				t.Errorf("libgpplug's file %q, want %s", p.File, plug)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the dlopen, libgpplug is %s: %s", p.State, p.Reason)
		}
		lines.Scan() // a round
	}
}
