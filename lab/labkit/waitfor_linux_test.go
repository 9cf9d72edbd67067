package labkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWaitfor runs the guests' waitfor with this machine's sh, and with
// busybox's when there is one, in PATH or the QEMU lab's cache (the
// guests run busybox sh).
func TestWaitfor(t *testing.T) {
	shells := [][]string{{"sh"}}
	bb, err := exec.LookPath("busybox")
	if err != nil {
		cache := os.Getenv("GPROBES_LAB")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache", "gprobes-qemulab")
		}
		bb = filepath.Join(cache, "debs", "busybox-root", "bin", "busybox")
	}
	if _, err := os.Stat(bb); err == nil {
		shells = append(shells, []string{bb, "sh"})
	} else {
		t.Logf("no busybox here: the script runs with sh only")
	}
	script, err := filepath.Abs("waitfor")
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range shells {
		t.Run(filepath.Base(sh[0]), func(t *testing.T) {
			run := func(args ...string) (string, int) {
				t.Helper()
				c := exec.Command(sh[0], append(append(sh[1:], script), args...)...)
				out, err := c.CombinedOutput()
				code := 0
				if err != nil {
					ee, ok := err.(*exec.ExitError)
					if !ok {
						t.Fatal(err)
					}
					code = ee.ExitCode()
				}
				return string(out), code
			}
			// the condition comes after a while: exit 0, nothing printed
			f := filepath.Join(t.TempDir(), "ready")
			go func() { time.Sleep(300 * time.Millisecond); os.WriteFile(f, nil, 0o644) }()
			if out, code := run("-t", "60", "the file", "test -e "+f); code != 0 || out != "" {
				t.Errorf("waiting for a file made after 0.3 s: exit %d, %q", code, out)
			}
			// never: at the deadline, what it waited for, its last output and SHOW
			out, code := run("-t", "1", "-s", "echo shown", "the moon", "echo seen-it; false")
			if code != 1 || !strings.HasPrefix(out, "waitfor: the moon: not after 1 s (") ||
				!strings.Contains(out, "checks of: echo seen-it; false)\nwaitfor: its last output:\nseen-it\nwaitfor: echo shown:\nshown\n") {
				t.Errorf("a condition that never holds: exit %d\n%s", code, out)
			}
			// -p: a process that has ended ends the wait at once
			p := exec.Command("true")
			if err := p.Run(); err != nil {
				t.Fatal(err)
			}
			pid := fmt.Sprint(p.Process.Pid)
			out, code = run("-t", "600", "-p", pid, "the daemon", "false")
			if code != 1 || !strings.HasPrefix(out, "waitfor: the daemon: process "+pid+" ended (") {
				t.Errorf("-p with a process that has ended: exit %d\n%s", code, out)
			}
			// -p with the condition true: success, whatever the process
			if out, code := run("-p", pid, "done", "true"); code != 0 || out != "" {
				t.Errorf("-p, condition true: exit %d %q", code, out)
			}
			for _, bad := range [][]string{{"one"}, {"-t", "x", "a", "b"}, {"-q", "a", "b"}, {"a", "b", "c"}} {
				if out, code := run(bad...); code != 2 || !strings.Contains(out, "usage: waitfor") {
					t.Errorf("waitfor %q: exit %d %q, want the usage and 2", bad, code, out)
				}
			}
		})
	}
}

// TestWaitCmd: the command line Wait writes runs waitfor as meant, quotes
// and all.
func TestWaitCmd(t *testing.T) {
	dir := t.TempDir()
	os.Symlink(mustAbs(t, "waitfor"), filepath.Join(dir, "waitfor"))
	w := Wait{What: "it's here", Cond: `grep -q "it's" ` + filepath.Join(dir, "f"), Show: "echo 'state: none'", Secs: 1}
	c := exec.Command("sh", "-c", w.Cmd())
	c.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
	out, err := c.CombinedOutput()
	if err == nil || !strings.HasPrefix(string(out), "waitfor: it's here: not after 1 s (") || !strings.HasSuffix(string(out), "waitfor: echo 'state: none':\nstate: none\n") {
		t.Errorf("%s: %v\n%s", w.Cmd(), err, out)
	}
	os.WriteFile(filepath.Join(dir, "f"), []byte("it's\n"), 0o644)
	w.Pid = "$$"
	c = exec.Command("sh", "-c", w.Cmd())
	c.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
	if out, err := c.CombinedOutput(); err != nil || len(out) != 0 {
		t.Errorf("%s: %v\n%s", w.Cmd(), err, out)
	}
}

func mustAbs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
