package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// freeze stops the process pid with SIGSTOP and returns once every thread
// of it is stopped (group-stop, "T" in /proc); thaw sends SIGCONT. A
// frozen gprobes drains no ring: the jump pads in its targets go on
// committing records until the ring is full and count the rest lost, as
// when the drain falls behind, but every time and to the record. The
// target must need nothing of its frozen tracer meanwhile (no new thread,
// no int3 hit, no exit).
func freeze(t *testing.T, pid int) (thaw func()) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %d: %v", pid, err)
	}
	thawed := false
	thaw = func() {
		if !thawed {
			thawed = true
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(thaw)
	seen := ""
	for end := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		running := threadStates(pid, func(s byte) bool { return s != 'T' })
		if len(running) == 0 {
			return thaw
		}
		seen = strings.Join(running, ", ")
		if time.Now().After(end) {
			t.Fatalf("process %d: a minute after SIGSTOP, threads not stopped: %s", pid, seen)
		}
	}
}

// threadStates lists the threads of pid whose state (the third field of
// /proc/PID/task/TID/stat) matches, as "TID:STATE".
func threadStates(pid int, match func(byte) bool) []string {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	var out []string
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread is gone
		}
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) {
			continue
		}
		if s := b[i+2]; match(s) {
			out = append(out, filepath.Base(filepath.Dir(p))+":"+string(s))
		}
	}
	return out
}

// runFrozen runs gprobes run ARGS in a process of its own, with a fixture
// that says "ready" and waits for a line (timeline's "wait"): once the
// fixture is ready, gprobes is frozen, the fixture released, and gprobes
// thawed when the fixture says "calls over". It returns the pid of the
// target and gprobes run's standard output (the fixture's lines in it).
func runFrozen(t *testing.T, args []string) (int, string) {
	t.Helper()
	exe, _ := os.Executable()
	cmd := exec.Command(exe, append([]string{"run"}, args...)...)
	cmd.Env = append(os.Environ(), "GPROBES_TEST_MAIN=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb lockedBuffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 64)
	var all strings.Builder
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func(want string) {
		t.Helper()
		timeout := time.After(2 * time.Minute)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("gprobes run %v ended its output before %q:\n%s%s", args, want, all.String(), errb.String())
				}
				all.WriteString(l + "\n")
				if l == want {
					return
				}
			case <-timeout:
				t.Fatalf("gprobes run %v: no %q in 2 minutes:\n%s%s", args, want, all.String(), errb.String())
			}
		}
	}
	next("ready")
	thaw := freeze(t, cmd.Process.Pid)
	in.Write([]byte("go\n"))
	next("calls over")
	thaw()
	for l := range lines {
		all.WriteString(l + "\n")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("gprobes run %v: %v\n%s%s", args, err, all.String(), errb.String())
	}
	out := all.String()
	m := regexp.MustCompile(`(?m)^pid:(\d+) `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no pid in the summary:\n%s", out)
	}
	pid, _ := strconv.Atoi(m[1])
	return pid, out
}
