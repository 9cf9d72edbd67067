package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/gprobes/gprobes/internal/testkit"
)

// Watch probes through the command line (testdata/watch/watch.c): run's
// variables and probe table, and a gprobes killed with SIGKILL while its
// debug registers are set in a process it attached to.

func watchFixture(t *testing.T) string {
	t.Helper()
	return testkit.CC(t, "watch", "-O1", "-g", "-pthread", "../../testdata/watch/watch.c")
}

func watchDPDF(t *testing.T, prog string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "watch.dpdf")
	src := fmt.Sprintf("name = %s\nmodtype = user\nvars = 2\n"+
		"watch = counter,8,w\nminor = 1\ninc lv,0\nexit 0\n"+
		"watch = counter,8,rw\nminor = 2\ninc lv,1\nexit 0\n", prog)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// gprobes run of a program with two watches: exact counts in its
// variables and the probe table, HOW naming the registers.
func TestWatchRun(t *testing.T) {
	prog := watchFixture(t)
	out, errs, code := gprobes(t, "run", watchDPDF(t, prog), "--", prog, "1000", "500", "0", "3", "nowait")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	if !strings.Contains(out, "lv 0=3000 1=4500") {
		t.Errorf("output:\n%s", out)
	}
	for _, re := range []string{`watch counter\s+0x[0-9a-f]+\s+\S+\s+watch DR0\s+3000\b`, `watch counter\s+0x[0-9a-f]+\s+\S+\s+watch DR1\s+4500\b`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("no line matching %s in\n%s", re, out)
		}
	}
}

// A daemon with watches in an attached process, killed with SIGKILL: a
// debug register left set makes the process's next write a SIGTRAP that
// kills it (the kernel's detach at the tracer's death leaves them). The
// guard, gprobes recover or the next daemon turn them off from the
// journal; the control round shows the threat is real.
func TestWatchSigkill(t *testing.T) {
	need(t, "gcc")
	t.Setenv("GPROBES_PROC_JOURNAL", t.TempDir())
	prog := watchFixture(t)
	probe := watchDPDF(t, prog)
	journal := func(pid int) string {
		b, _ := os.ReadFile(filepath.Join(os.Getenv("GPROBES_PROC_JOURNAL"), fmt.Sprintf("pid%d.json", pid)))
		return string(b)
	}
	for _, how := range []string{"guard", "recover", "next daemon", "none"} {
		t.Run(strings.ReplaceAll(how, " ", "-"), func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(prog, "5000", "100", "2", "2")
			in, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill() })
			sc := bufio.NewScanner(stdout)
			if !sc.Scan() || !strings.HasPrefix(sc.Text(), "ready ") {
				t.Fatal("the fixture printed no ready line")
			}
			pid := cmd.Process.Pid
			sock, d := harmDaemon(t, dir)
			mustRun(t, "insert", "--socket", sock, "--target", fmt.Sprintf("pid:%d", pid), probe)
			if j := journal(pid); !strings.Contains(j, `"watch"`) {
				t.Fatalf("no watch in the journal: %q", j)
			}
			guard := guardOf(t, d.Process.Pid)
			if how != "guard" {
				killDead(t, guard)
			}
			d.Process.Kill()
			d.Wait()
			gone := func() bool { return journal(pid) == "" }
			switch how {
			case "guard":
				waitFor(t, gone, "the guard to turn the debug registers off")
			case "recover":
				// the daemon and its guard are dead: nothing turns them off
				if gone() {
					t.Fatal("the journal went with no guard and no recover: the test proves nothing")
				}
				out := mustRun(t, "recover")
				if !strings.Contains(out, "2 watch debug registers turned off in 3 threads") {
					t.Errorf("recover said:\n%s", out)
				}
			case "next daemon":
				daemonProcess(t, filepath.Join(dir, "n.sock"), filepath.Join(dir, "nstate"))
				waitFor(t, gone, "the next daemon to turn the debug registers off")
			}
			fmt.Fprintln(in, "go")
			var rest strings.Builder
			for sc.Scan() {
				rest.WriteString(sc.Text() + "\n")
			}
			err := cmd.Wait()
			ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if how == "none" {
				if !ws.Signaled() || ws.Signal() != syscall.SIGTRAP {
					t.Errorf("with the debug registers left on, the fixture ended %v (%v), want killed by SIGTRAP", ws, err)
				}
				mustRun(t, "recover") // the journal of a process that is gone
				return
			}
			if err != nil || !strings.Contains(rest.String(), "done threads 4 writes 20000 reads 400") {
				t.Errorf("%s: the fixture after the kill: %v (%v)\n%s", how, err, ws, rest.String())
			}
		})
	}
}
