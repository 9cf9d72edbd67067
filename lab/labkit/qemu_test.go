package labkit

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/internal/testkit"
)

// fakeGuest runs script with sh as the "QEMU": its stdout is the serial
// line.
func fakeGuest(t *testing.T, script string) *QEMU {
	t.Helper()
	q, err := StartQEMU(context.Background(), QEMUConfig{NoLabLock: true, Binary: "sh", Args: []string{"-c", script}, TmpDir: t.TempDir(),
		Panic: regexp.MustCompile(`Kernel panic - not syncing`),
		Milestones: []Milestone{
			{Name: "the kernel", Re: regexp.MustCompile(`^Linux version`)},
			{Name: "the init", Re: regexp.MustCompile(`^INIT`)},
			{Name: "the loop", Re: regexp.MustCompile(`^READY`)},
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Kill)
	return q
}

// A boot wait that times out says which milestones came, which did not,
// and how long ago the last line came.
func TestProgress(t *testing.T) {
	q := fakeGuest(t, "echo noise; echo Linux version 6.1; echo INIT; exec sleep 600")
	_, _, err := q.WaitLine(context.Background(), 0, time.Second, func(l string) bool { return strings.HasPrefix(l, "READY") }, true)
	if err == nil || !regexp.MustCompile(`^timeout after 1s \(the kernel at \d+\.\d s; the init at \d+\.\d s; the loop not seen; 3 serial lines, the last at \d+\.\d s, \d+ s ago\)\n--- serial log`).MatchString(err.Error()) {
		t.Errorf("%v", err)
	}
	// QEMU's exit says so too
	q = fakeGuest(t, "echo Linux version 6.1; exit 3")
	_, _, err = q.WaitLine(context.Background(), 0, time.Minute, func(l string) bool { return false }, true)
	if err == nil || !strings.Contains(err.Error(), "sh exited (exit status 3; the kernel at ") || !strings.Contains(err.Error(), "the init not seen; 1 serial lines") {
		t.Errorf("%v", err)
	}
}

// A panic ends a boot wait at once, with the rest of its message: up to
// Linux's end marker, or QEMU's exit.
func TestPanicMessage(t *testing.T) {
	q := fakeGuest(t, "echo Linux version 6.1; echo 'Kernel panic - not syncing: VFS'; echo ' dump_stack'; "+
		"echo '---[ end Kernel panic - not syncing: VFS ]---'; exec sleep 600")
	_, _, err := q.WaitLine(context.Background(), 0, 10*time.Minute, func(l string) bool { return false }, true)
	if err == nil || !strings.HasPrefix(err.Error(), "panic (the kernel at ") || !strings.Contains(err.Error(), "---[ end Kernel panic") {
		t.Errorf("%v", err)
	}
	q = fakeGuest(t, "echo 'Kernel panic - not syncing: VFS'; echo ' dump_stack'; exit 1")
	_, _, err = q.WaitLine(context.Background(), 0, 10*time.Minute, func(l string) bool { return false }, true)
	if err == nil || !strings.HasPrefix(err.Error(), "panic (") || !strings.Contains(err.Error(), " dump_stack") {
		t.Errorf("%v", err)
	}
}

// A lab holds the lab lock from before QEMU starts until it has exited:
// another process cannot take it meanwhile (flock -n fails), and can
// after.
func TestLabLockHeldWhileQEMURuns(t *testing.T) {
	flock := testkit.Tool(t, "flock")
	lock := filepath.Join(t.TempDir(), "lab.lock")
	t.Setenv("GPROBES_LAB_LOCK", lock)
	free := func() bool { return exec.Command(flock, "-n", lock, "true").Run() == nil }
	stop := filepath.Join(t.TempDir(), "stop")
	q, err := StartQEMU(context.Background(), QEMUConfig{Binary: "sh", TmpDir: t.TempDir(),
		Args: []string{"-c", `echo READY; while [ ! -e "$0" ]; do sleep 0.05; done`, stop}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Kill)
	if _, _, err := q.WaitLine(context.Background(), 0, time.Minute, func(l string) bool { return l == "READY" }, false); err != nil {
		t.Fatal(err)
	}
	if free() {
		t.Fatal("another process took the lab lock while a lab runs")
	}
	os.WriteFile(stop, nil, 0o644)
	<-q.Done()
	testkit.WaitTrue(t, time.Minute, "the lab lock given back after QEMU's exit", free)
}
