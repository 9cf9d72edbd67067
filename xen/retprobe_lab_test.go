package xen_test

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/lab/labkit"
	"github.com/gprobes/gprobes/lab/xenlab"
)

// TestXenRetprobe runs testdata/examples/getppid_latency.dpdf (an entry
// probe stamping each call of __x64_sys_getppid in an instance variable,
// a return probe logging the caller, the return value and the latency)
// against a PV domU from dom0 through a daemon: the native backend with
// debug registers (the entry and the return take two of the four), with
// int3 bytes, and through gdbsx. Each time the calls of the workload's
// process are exact, each returns the parent's pid, none is dropped or
// missed, query and log name the kind, and the domain runs on afterwards.
func TestXenRetprobe(t *testing.T) {
	example, err := os.ReadFile("../testdata/examples/getppid_latency.dpdf")
	if err != nil {
		t.Fatal(err)
	}
	l := pvLab(t, labSetup{
		files: map[string]string{
			"/etc/gprobes/getppid.dpdf": string(example),
			// gdbsx gives no gs_base: no task, so push pid would be an
			// invalid-operand exception; a 0 instead
			"/etc/gprobes/getppid-gdbsx.dpdf": strings.Replace(string(example), "push pid ", "push d,0 ", 1)},
		dump: dumpOf("/tmp/daemon.log", "/tmp/daemon3.log")})
	vm, run := l.vm, l.run
	d := vm.DomID("domu1")
	syms := guestSyms
	const n = 5
	// work runs gpwork in domu1 and returns its pid and its parent's (the
	// shell that runs the line execs gpwork: its PPid is gpwork's)
	work := func() (pid, ppid uint64) {
		t.Helper()
		out, rc, err := vm.RunDomU("domu1", fmt.Sprintf("grep PPid /proc/$$/status; exec gpwork counts %d /etc/gp-a", n), 10*time.Minute)
		m := regexp.MustCompile(`(?s)PPid:\s+(\d+).*GPWORK pid (\d+)`).FindStringSubmatch(out)
		if err != nil || rc != 0 || m == nil || !strings.Contains(out, fmt.Sprintf("getppid %d ", n)) {
			t.Fatalf("domu1: gpwork: rc %d %v\n%s", rc, err, out)
		}
		fmt.Sscan(m[1], &ppid)
		fmt.Sscan(m[2], &pid)
		return pid, ppid
	}
	// returns reads the log's return-probe records of a target: for
	// each, the caller's pid, the value returned, the latency
	returns := func(sock, target string) (recs [][3]uint64) {
		for _, l := range strings.Split(run("gprobes log --json --socket "+sock), "\n") {
			var rec struct {
				Target, Probe string
				Minor         int
				Data          string
			}
			if json.Unmarshal([]byte(l), &rec) != nil || rec.Minor != 2 || rec.Target != target {
				continue
			}
			b, _ := hex.DecodeString(rec.Data)
			if len(b) != 24 || rec.Probe != "retprobe" {
				t.Fatalf("record %s", l)
			}
			recs = append(recs, [3]uint64{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])})
		}
		return recs
	}
	// check counts gpwork's calls (and the shell's one before it exec'd
	// gpwork), by pid, or by the value returned where the records cannot
	// name the task; and query's counters of the return probe
	check := func(what, sock, target string, pid, ppid uint64, byPid bool, kick func()) {
		t.Helper()
		recs := returns(sock, target)
		got := 0
		for _, r := range recs {
			if byPid && r[0] != pid || !byPid && r[1] != ppid {
				continue
			}
			got++
			if r[1] != ppid || int64(r[2]) <= 0 {
				t.Errorf("%s: getppid of pid %d returned %d in %d ns, want %d", what, r[0], r[1], int64(r[2]), ppid)
			}
		}
		if got != n+1 {
			t.Errorf("%s: %d returns of getppid for pid %d, want %d (of %d records)", what, got, pid, n+1, len(recs))
		}
		var q struct {
			Probes []struct {
				Target, Kind, Location, How, State string
				Hits, Missed, Dropped              uint64
			}
		}
		var out string
		if kick == nil {
			out = run("gprobes query --json --all --socket " + sock)
		} else {
			// the query waits for the target to stop: through gdbsx,
			// at the next hit. A kick before the query reached the
			// daemon serves nothing: kick until the answer is there
			run("rm -f /tmp/q.json; (gprobes query --json --all --socket " + sock + " >/tmp/q.json.part; mv /tmp/q.json.part /tmp/q.json) &")
			for i := 0; ; i++ {
				kick()
				o, rc, _ := vm.Run(labkit.Wait{What: "the query's answer after a hit", Cond: "test -e /tmp/q.json", Show: "ps", Secs: 30}.Cmd()+" && cat /tmp/q.json", 2*time.Minute)
				if rc == 0 {
					out = o
					break
				}
				if i == 5 {
					t.Fatalf("%s: query did not answer after %d hits:\n%s", what, i+1, o)
				}
			}
		}
		if err := json.Unmarshal([]byte(out), &q); err != nil {
			t.Fatalf("%s: query: %v\n%s", what, err, out)
		}
		found := false
		for _, p := range q.Probes {
			if p.Target != target || p.Kind != "retprobe" {
				continue
			}
			found = true
			t.Logf("%s: %s %s %s, HOW %q, hits %d missed %d dropped %d", what, p.Kind, p.Location, p.State, p.How, p.Hits, p.Missed, p.Dropped)
			if p.State != "active" || !strings.HasPrefix(p.How, "ret: entry and 1 return") || p.Hits < n+1 || p.Missed != 0 || p.Dropped != 0 {
				t.Errorf("%s: query: %+v", what, p)
			}
		}
		if !found {
			t.Errorf("%s: no retprobe in query:\n%s", what, out)
		}
	}

	// the native backend: debug registers (the entry and the return take
	// two of the four), then int3 bytes (a daemon of their own)
	run(xenlab.DaemonUp("", "/tmp/g.sock", "", "/tmp/daemon.log") + "; " + xenlab.DaemonUp("GPROBES_XEN_BREAKPOINTS=int3 ", "/tmp/g3.sock", "--state /tmp/g3", "/tmp/daemon3.log"))
	target := fmt.Sprintf("xen:%d", d)
	for _, sock := range []string{"/tmp/g.sock", "/tmp/g3.sock"} {
		run(fmt.Sprintf("gprobes insert --socket %s --target %s %s /etc/gprobes/getppid.dpdf", sock, target, syms))
		pid, ppid := work()
		check(target+" ("+sock+")", sock, target, pid, ppid, true, nil)
		run("gprobes remove --socket " + sock + " --all")
	}

	// gdbsx: its registers have no gs_base, so records cannot name the
	// task (pid 0): the calls are told by the value they return. gdbsx
	// ignores ^C: a command to the daemon is carried out at the next hit
	gdb := "gdb:127.0.0.1:9999"
	run(xenlab.GdbsxUp(d) + fmt.Sprintf("; gprobes insert --socket /tmp/g.sock --target %s %s /etc/gprobes/getppid-gdbsx.dpdf", gdb, syms))
	pid, ppid := work()
	check("gdbsx", "/tmp/g.sock", gdb, pid, ppid, false, func() { vm.RunDomU("domu1", "true", time.Minute) })
	// the remove: at one hit (which a getppid in domu1 makes while the
	// probes are in) the daemon takes them out and detaches, and gdbsx
	// lets the domain go. A hit before the daemon waits for it serves
	// nothing: again until the remove has ended. Only hits: a pause
	// (xl pause) the test made after gdbsx had let the domain go would
	// keep it paused for good (Xen counts pauses; it took two stops, one
	// of them a pause, when the daemon's remove was three commands)
	run("rm -f /tmp/remove.out; (gprobes remove --socket /tmp/g.sock --all >/tmp/remove.out 2>&1; echo rc=$? >>/tmp/remove.out) &")
	for i := 0; ; i++ {
		vm.RunDomU("domu1", "gpwork counts 1 >/dev/null", time.Minute)
		out := run(labkit.Wait{What: "the remove through gdbsx to end", Cond: "grep -q rc= /tmp/remove.out", Show: fmt.Sprintf("xl list %d", d), Secs: 20}.Cmd() +
			fmt.Sprintf("; cat /tmp/remove.out; xl list %d", d))
		if strings.Contains(out, "rc=") {
			if !strings.Contains(out, "rc=0") {
				t.Fatalf("remove through gdbsx:\n%s", out)
			}
			// gdbsx ends at the detach, once it let the domain go
			run(xenlab.Gone("gdbsx"))
			break
		} else if i == 5 {
			t.Fatalf("remove through gdbsx did not end after %d hits:\n%s", i+1, out)
		}
	}
	if w, rc, err := vm.RunDomU("domu1", "gpwork counts 1; echo OOPS=$(dmesg | grep -c -e Oops -e 'int3:')", 5*time.Minute); err != nil || rc != 0 || !strings.Contains(w, "OOPS=0") {
		// who holds domu1's console pty in dom0, and what its console
		// log says (a paused domain gives no acknowledgement)
		diag, _, _ := vm.Run(fmt.Sprintf("tty=$(xenstore-read /local/domain/%d/console/tty); echo tty=$tty; for p in /proc/[0-9]*; do ls -l $p/fd 2>/dev/null | grep -q \"$tty\" && echo \"holder $p $(tr '\\0' ' ' <$p/cmdline)\"; done; xl list; ps | grep -v ' \\[' | tail -40; ls /var/log/xen/console/ 2>/dev/null; tail -c 1500 /var/log/xen/console/guest-domu1.log 2>/dev/null", d), time.Minute)
		t.Errorf("domu1 after gdbsx: rc %d %v\n%s\ndom0:\n%s", rc, err, w, diag)
	}
	if w, rc, err := vm.RunDomU("domu1", "gpwork counts 2; echo OOPS=$(dmesg | grep -c -e Oops -e 'int3:')", 5*time.Minute); err != nil || rc != 0 || !strings.Contains(w, "OOPS=0") {
		t.Errorf("domu1 at the end: rc %d %v\n%s", rc, err, w)
	}
	// the lab as found: no daemon
	run("kill $(pidof gprobes); " + xenlab.Gone("gprobes"))
}
