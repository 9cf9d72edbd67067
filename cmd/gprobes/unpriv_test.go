package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
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

// TestJumpUnprivileged: a user who may
// ptrace their own process probes it without root, on the jump route.
// Under root (CI) gprobes and the fixture run as nobody (uid and gid
// 65534, no groups, no capabilities: setpriv); otherwise as the user
// running the test. gprobes is this test binary (GPROBES_TEST_MAIN=1)
// copied where that user can run it, with HOME and TMPDIR in a folder of
// its own and no other environment (the journals go to gprobes' default
// for a user: $TMPDIR/gprobes-UID/proc).
// Both ways of probing a process are tried: run -- PROG (gprobes starts
// it) and run --target pid:N (a process of the same user, running). Each
// checks exit 0, HOW jump and exact HITS for both probes in the run
// summary, and the program's own result.
func TestJumpUnprivileged(t *testing.T) {
	need(t, "gcc")
	u := unprivileged(t)
	gp := filepath.Join(u.dir, "gprobes")
	exe, _ := os.Executable()
	copyFile(t, exe, gp, 0o755)
	harm := filepath.Join(u.dir, "harm")
	if err := gccHarm(harm, 0); err != nil {
		t.Fatal(err)
	}
	os.Chmod(harm, 0o755)
	probe := harmProbe(t, u.dir, harm)

	// the user is who the test says: no root, no capability
	status := u.output(t, "cat", "/proc/self/status")
	for _, l := range strings.Split(status, "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && ((f[0] == "Uid:" && f[1] == "0") || (f[0] == "CapEff:" && strings.Trim(f[1], "0") != "")) {
			t.Fatalf("not unprivileged: %s\n%s", l, status)
		}
	}

	t.Run("exec", func(t *testing.T) {
		const n = 250000
		want := uint64(harmThreads * n)
		out, errs, code := u.run(t, gp, "run", "-q", probe, "--", harm, "-t", strconv.Itoa(harmThreads), "-n", strconv.Itoa(n))
		total, pw, ok := harmTotal(out)
		if code != 0 || !ok || total != pw || uint64(pw) != want {
			t.Fatalf("run -- harm as uid %d: exit %d, want %d calls\n%s%s", u.uid, code, want, out, errs)
		}
		checkSummary(t, out+errs, harm, want)
	})

	t.Run("pid", func(t *testing.T) {
		if b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); err == nil && strings.TrimSpace(string(b)) != "0" {
			testkit.SkipOrFail(t, "yama ptrace_scope %s: a user may not ptrace a process that is not its child here", strings.TrimSpace(string(b)))
		}
		h := startHarmRunning(t, harm, u.dir, u.wrap...)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		r := u.command(ctx, gp, "run", "-q", "--target", fmt.Sprintf("pid:%d", h.pid), probe)
		var rout, rerr lockedBuffer
		r.Stdout, r.Stderr = &rout, &rerr
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		defer r.Process.Kill()
		ran := make(chan error, 1)
		go func() { ran <- r.Wait() }()
		for end := time.Now().Add(30 * time.Second); !allProbesIn(h.pid); time.Sleep(5 * time.Millisecond) {
			select {
			case err := <-ran:
				code, out := h.stopAndWait()
				t.Fatalf("run --target pid:%d as uid %d ended (%v) before its probes were in; the fixture exited %d\n%s\nrun:\n%s%s", h.pid, u.uid, err, code, out, rout.String(), rerr.String())
			default:
			}
			if time.Now().After(end) {
				code, out := h.stopAndWait()
				t.Fatalf("run --target pid:%d as uid %d put no probes in for 30 s; the fixture exited %d\n%s\nrun:\n%s%s", h.pid, u.uid, code, out, rout.String(), rerr.String())
			}
		}
		openAndWait(t, h.gate, h.started)
		h.mustBeRunning(t, "under run --target as "+strconv.Itoa(u.uid))
		out := h.finish(t, "the fixture under run --target pid:N")
		_, calls, _ := harmTotal(out)
		if err := <-ran; err != nil {
			t.Fatalf("run --target pid:%d as uid %d: %v\n%s%s", h.pid, u.uid, err, rout.String(), rerr.String())
		}
		checkSummary(t, rout.String()+rerr.String(), harm, uint64(calls))
	})
}

// checkSummary checks run's lv line and probe table: both probes on the
// jump route with want hits each.
func checkSummary(t *testing.T, out, harm string, want uint64) {
	t.Helper()
	lock, push, ok := lvs(out, harm)
	if !ok || uint64(lock) != want || uint64(push) != want {
		t.Errorf("lv %d %d, want %d each\n%s", lock, push, want, out)
	}
	sum := summaryProbes(out, harm)
	for _, loc := range []string{"f_lock", "f_push"} {
		if p := sum[loc]; p.how != "jump" || p.hits != want {
			t.Errorf("%s: HOW %q HITS %d, want jump and %d\n%s", loc, p.how, p.hits, want, out)
		}
	}
}

// unprivilegedUser runs commands as the user of TestJumpUnprivileged, in
// a folder of its own.
type unprivilegedUser struct {
	uid  int
	wrap []string // the command that makes a command run as that user
	dir  string   // readable by it, and its own
	env  []string
}

// unprivileged is nobody under root (setpriv: util-linux, in Debian's
// essential set), the user itself otherwise.
func unprivileged(t *testing.T) *unprivilegedUser {
	t.Helper()
	u := &unprivilegedUser{uid: os.Geteuid()}
	if u.uid == 0 {
		need(t, "setpriv")
		u.uid = 65534
		u.wrap = []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}
	}
	u.dir = t.TempDir()
	// t.TempDir and the folder above it are 0700; the rest of the path
	// must let the user through
	for _, d := range []string{filepath.Dir(u.dir), u.dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for d := filepath.Dir(filepath.Dir(u.dir)); ; d = filepath.Dir(d) {
		if st, err := os.Stat(d); err != nil || st.Mode().Perm()&0o001 == 0 {
			t.Fatalf("%s cannot be crossed by uid %d: set TMPDIR to a folder every user can reach", d, u.uid)
		}
		if d == "/" {
			break
		}
	}
	home := filepath.Join(u.dir, "home")
	for _, d := range []string{home} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if u.wrap != nil {
		// the user owns its folder: the fixture creates its started file
		for _, d := range []string{u.dir, home} {
			if err := os.Chown(d, u.uid, u.uid); err != nil {
				t.Fatal(err)
			}
		}
	}
	// no GPROBES_PROC_JOURNAL: the journals go where gprobes puts a
	// user's by default ($TMPDIR/gprobes-UID/proc without XDG_RUNTIME_DIR)
	u.env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "TMPDIR=" + home, "GPROBES_TEST_MAIN=1"}
	return u
}

func (u *unprivilegedUser) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	argv := append(append(append([]string(nil), u.wrap...), name), args...)
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	c.Env = u.env
	c.Dir = filepath.Join(u.dir, "home")
	return c
}

// run runs a command as the user and returns stdout, stderr and the exit
// status (128+N for a signal N).
func (u *unprivilegedUser) run(t *testing.T, name string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := u.command(ctx, name, args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		ws := ee.Sys().(syscall.WaitStatus)
		code = ws.ExitStatus()
		if ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func (u *unprivilegedUser) output(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, errs, code := u.run(t, name, args...)
	if code != 0 {
		t.Fatalf("%s as uid %d: exit %d\n%s%s", name, u.uid, code, out, errs)
	}
	return out
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
