//go:build linux

package testkit

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func lockFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "lab.lock")
	t.Setenv("GPROBES_LAB_LOCK", p)
	return p
}

// held reports whether another process could take the lock now.
func held(t *testing.T, flock, path string) bool {
	t.Helper()
	err := exec.Command(flock, "-n", path, "true").Run()
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 1 {
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	return false
}

// LockLab waits for another process's lock, holds it against the others
// (once per process, however many take it) and gives it back.
func TestLabLock(t *testing.T) {
	flock := Tool(t, "flock")
	path := lockFile(t)
	other := exec.Command(flock, path, "-c", "echo held; read x")
	in, err := other.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outp, err := other.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer other.Process.Kill()
	if l, err := bufio.NewReader(outp).ReadString('\n'); err != nil || l != "held\n" {
		t.Fatalf("the other process: %q, %v", l, err)
	}
	got := make(chan func(), 1)
	go func() {
		release, err := LockLab()
		if err != nil {
			t.Error(err)
		}
		got <- release
	}()
	WaitTrue(t, time.Minute, "LockLab to wait for the other process", func() bool { return labLock.waiting.Load() > 0 })
	if HoldingLab() {
		t.Fatal("holding the lab while another process has it")
	}
	in.Close() // the other process ends and drops its lock
	var release func()
	select {
	case release = <-got:
	case <-time.After(time.Minute):
		t.Fatal("LockLab still waiting a minute after the other process let go")
	}
	other.Wait()
	release2, err := LockLab() // counted: no wait on ourselves
	if err != nil {
		t.Fatal(err)
	}
	if !HoldingLab() || !held(t, flock, path) {
		t.Fatal("the lock is not held")
	}
	release()
	release() // a second call does nothing
	if !HoldingLab() || !held(t, flock, path) {
		t.Fatal("the lock was dropped with one holder left")
	}
	release2()
	if HoldingLab() || held(t, flock, path) {
		t.Fatal("the lock is still held after both released it")
	}
}

// Under `flock -o LOCK go test ...` the lock is an ancestor's: LockLab
// does not wait for it. The helper mode (TESTKIT_LOCK_CHILD=1) is the test
// process under flock.
func TestLabLockAncestor(t *testing.T) {
	if os.Getenv("TESTKIT_LOCK_CHILD") == "1" {
		done := make(chan error, 1)
		go func() {
			release, err := LockLab()
			if err == nil {
				release()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute):
			t.Fatal("LockLab waits for the lock its ancestor flock holds")
		}
		return
	}
	flock := Tool(t, "flock")
	path := lockFile(t)
	// sh between flock and the test: the holder is a grandparent
	cmd := exec.Command(flock, "-o", path, "sh", "-c", `"$0" -test.run='^TestLabLockAncestor$' -test.v; echo exit $?`, os.Args[0])
	cmd.Env = append(os.Environ(), "TESTKIT_LOCK_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestLabLockAncestor") {
		t.Fatalf("%v:\n%s", err, out)
	}
}
