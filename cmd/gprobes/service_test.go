package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gprobes/gprobes/daemon"
	"github.com/gprobes/gprobes/internal/testkit"
)

// systemdTool is the path of one of systemd's tools. Missing, it is
// installed (Debian's systemd package) when the tests run as root under
// CI=true; otherwise the test skips, or fails under CI=true.
func systemdTool(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if testkit.CI() && os.Geteuid() == 0 {
		out, err := exec.Command("apt-get", "install", "-y", "--no-install-recommends", "systemd").CombinedOutput()
		if err != nil {
			out2, err2 := exec.Command("sh", "-c", "apt-get update && apt-get install -y --no-install-recommends systemd").CombinedOutput()
			out, err = append(out, out2...), err2
		}
		if err != nil {
			t.Fatalf("CI=true: %s is missing and apt-get install systemd failed: %v\n%s", name, err, out)
		}
	}
	return testkit.Tool(t, name)
}

// The units of dist/systemd pass systemd-analyze verify without a word:
// the service and its socket unit together, ExecStart pointing at a
// gprobes that exists (verify checks it).
func TestSystemdUnitsVerify(t *testing.T) {
	analyze := systemdTool(t, "systemd-analyze")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, unit := range []string{"gprobes.service", "gprobes.socket"} {
		b, err := os.ReadFile(filepath.Join("../../dist/systemd", unit))
		if err != nil {
			t.Fatal(err)
		}
		if unit == "gprobes.service" {
			if !bytes.Contains(b, []byte("ExecStart=/usr/local/bin/gprobes daemon")) {
				t.Fatalf("%s: ExecStart is not /usr/local/bin/gprobes daemon, as README.md installs it", unit)
			}
			b = bytes.ReplaceAll(b, []byte("/usr/local/bin/gprobes"), []byte(exe))
		}
		if err := os.WriteFile(filepath.Join(dir, unit), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(analyze, "verify", "--man=no", filepath.Join(dir, "gprobes.socket"), filepath.Join(dir, "gprobes.service"))
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	// a unit with a mistake is caught: the check can fail
	bad := filepath.Join(dir, "bad")
	os.Mkdir(bad, 0o755)
	b, _ := os.ReadFile(filepath.Join(dir, "gprobes.service"))
	os.WriteFile(filepath.Join(bad, "gprobes.service"), bytes.Replace(b, []byte("Type=exec"), []byte("Type=sometimes"), 1), 0o644)
	b, _ = os.ReadFile(filepath.Join(dir, "gprobes.socket"))
	os.WriteFile(filepath.Join(bad, "gprobes.socket"), b, 0o644)
	out, _ = exec.Command(analyze, "verify", "--man=no", filepath.Join(bad, "gprobes.socket"), filepath.Join(bad, "gprobes.service")).CombinedOutput()
	if !bytes.Contains(out, []byte("sometimes")) {
		t.Errorf("systemd-analyze verify says nothing of a bad Type=:\n%s", out)
	}
}

// Socket activation as systemd does it (systemd-socket-activate: the
// listening socket as descriptor 3, LISTEN_PID, LISTEN_FDS): the first
// client starts the daemon, which serves that socket, hides the variables
// from the processes it starts, and leaves the socket to its owner at
// shutdown.
func TestSocketActivation(t *testing.T) {
	activate := systemdTool(t, "systemd-socket-activate")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "activated.sock")
	cmd := exec.Command(activate, "-l", sock, "-E", "GPROBES_TEST_MAIN=1", exe, "daemon", "--state", filepath.Join(dir, "state"))
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	for end := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("no socket from systemd-socket-activate:\n%s", out.String())
		}
	}
	// the first connection starts the daemon, and is answered by it
	var st daemon.StatusResponse
	if err := json.Unmarshal([]byte(mustRun(t, "status", "--socket", sock, "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Pid != cmd.Process.Pid || st.Socket != sock {
		t.Errorf("status: pid %d socket %s; want %d (systemd-socket-activate execs the daemon) and %s\n%s", st.Pid, st.Socket, cmd.Process.Pid, sock, out.String())
	}
	// the daemon writes the line before it answers, but it reaches out
	// through a pipe and exec's copying goroutine, which may lag the
	// answer: waited for, a moment
	for end := time.Now().Add(time.Minute); !strings.Contains(out.String(), "serving "+sock); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Errorf("the daemon does not say it serves %s:\n%s", sock, out.String())
			break
		}
	}
	// its children (the guard) do not get the variables
	var kids []string
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(st.Pid) + "/task/*/children")
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		kids = append(kids, strings.Fields(string(b))...)
	}
	if len(kids) == 0 {
		t.Error("the daemon started no guard")
	}
	for _, k := range kids {
		env, _ := os.ReadFile("/proc/" + k + "/environ")
		if bytes.Contains(env, []byte("LISTEN_FDS=")) || bytes.Contains(env, []byte("LISTEN_PID=")) {
			t.Errorf("child %s of the daemon has LISTEN_FDS or LISTEN_PID", k)
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("daemon exit: %v\n%s", err, out.String())
	}
	if fi, err := os.Lstat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("the activated socket went with the daemon: %v", err)
	}
}
