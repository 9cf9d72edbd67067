package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/internal/testkit"
)

// needKernelBPF skips the test (fails it under CI=true) when this kernel
// or process cannot run the kernel target.
func needKernelBPF(t *testing.T) {
	t.Helper()
	if err := bpf.Available(); err != nil {
		testkit.SkipOrFail(t, "%v", err)
	}
}

// The kernel target through the daemon: insert, query, getvars (the
// kernel's gv apart), log, remove by minor, then SIGKILL: every program
// and link the daemon made is gone from the kernel.
func TestDaemonKernel(t *testing.T) {
	needKernelBPF(t)
	dir := t.TempDir()
	sock, state := filepath.Join(dir, "d.sock"), filepath.Join(dir, "state")
	d, dout := daemonProcess(t, sock, state)
	// hits of this process only, by the program (a daemon's insert has no
	// process filter); minor 2 counts every process's
	probe := filepath.Join(dir, "k.dpdf")
	os.WriteFile(probe, []byte(fmt.Sprintf(`name = vmlinux
modtype = kernel
vars = 2
gvars = 1
tracepoint = syscalls:sys_enter_getppid
minor = 1
push pid
push d,%d
sub
jnz other
inc lv,0
inc gv,0
push tid
log 1
exit 1
other:
exit 0
tracepoint = syscalls:sys_enter_getppid
minor = 2
inc lv,1
exit 0
`, os.Getpid())), 0o644)
	mustRun(t, "insert", "--socket", sock, "--target", "kernel", probe)
	const n = 5000
	for i := 0; i < n; i++ {
		syscall.Getppid()
	}
	var v struct {
		Modules []struct {
			Target string
			LV     []string
		}
		GV       []string
		KernelGV []string `json:"kernel_gv"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, "getvars", "--socket", sock, "--all", "--json")), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Modules) != 1 || v.Modules[0].Target != "kernel" || v.Modules[0].LV[0] != strconv.Itoa(n) || len(v.KernelGV) != 1 || v.KernelGV[0] != strconv.Itoa(n) {
		t.Fatalf("getvars: %+v", v)
	}
	if lv1, _ := strconv.Atoi(v.Modules[0].LV[1]); lv1 < n {
		t.Fatalf("minor 2 counted %d, below this process's %d calls", lv1, n)
	}
	// status: the daemon's kernel target says what this host allows it,
	// the matrix of gprobes doctor (this process is root as the daemon)
	var st struct {
		KernelAbilities []bpf.Ability `json:"kernel_abilities"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, "status", "--socket", sock, "--json")), &st); err != nil {
		t.Fatal(err)
	}
	var miss []string
	for _, a := range bpf.Detect().Abilities[1:] { // the daemon's has no "ebpf": it runs
		if !a.OK {
			miss = append(miss, a.Name)
		}
	}
	if want := bpf.Detect().Abilities[1:]; len(st.KernelAbilities) != len(want) {
		t.Errorf("status: kernel abilities %+v, want %+v", st.KernelAbilities, want)
	} else {
		for i, a := range st.KernelAbilities {
			if a != want[i] {
				t.Errorf("status: %+v, want %+v", a, want[i])
			}
		}
	}
	if out, want := mustRun(t, "status", "--socket", sock), "kernel target lacks "+strings.Join(miss, ", ")+" (status --json says why)\n"; len(miss) > 0 && !strings.Contains(out, want) {
		t.Errorf("status, want %q:\n%s", want, out)
	}
	text := mustRun(t, "getvars", "--socket", sock, "--all")
	if !strings.Contains(text, "kernel gv: 0="+strconv.Itoa(n)) {
		t.Errorf("getvars text:\n%s", text)
	}
	var q struct {
		Probes []struct {
			Target, State, How string
			Minor              int
			Hits, Faults       uint64
		}
	}
	if err := json.Unmarshal([]byte(mustRun(t, "query", "--socket", sock, "--all", "--json")), &q); err != nil || len(q.Probes) != 2 {
		t.Fatalf("query: %v %+v", err, q)
	}
	for _, p := range q.Probes {
		if p.Target != "kernel" || p.State != "active" || p.How != "tracepoint" || p.Hits < n || p.Faults != 0 {
			t.Errorf("query: %+v", p)
		}
	}
	// the log: n records of this process, each its tid
	deadline := time.Now().Add(10 * time.Second)
	for {
		out := mustRun(t, "log", "--socket", sock, "--json")
		mine := 0
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var r struct {
				Pid, Tid int
				Minor    int
				Data     string // hex
			}
			if json.Unmarshal([]byte(l), &r) == nil && r.Minor == 1 && r.Pid == os.Getpid() && len(r.Data) == 16 {
				mine++
			}
		}
		if mine == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log has %d records of this process, want %d", mine, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out := mustRun(t, "remove", "--socket", sock, "vmlinux", "--minor", "2"); !strings.Contains(out, "1") {
		t.Errorf("remove --minor 2: %s", out)
	}
	// what the daemon holds in the kernel, from its file descriptors
	progs := bpfIDs(t, d.Process.Pid, "prog_id:")
	links := bpfIDs(t, d.Process.Pid, "link_id:")
	if len(progs) == 0 || len(links) != 1 {
		t.Fatalf("the daemon holds programs %v and links %v, want some and one link", progs, links)
	}
	d.Process.Signal(syscall.SIGKILL)
	d.Wait()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		left := 0
		for _, id := range progs {
			if p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id)); err == nil {
				p.Close()
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("%d of the SIGKILLed daemon's programs %v are still loaded\n%s", left, progs, dout)
		}
	}
	syscall.Getppid()
}

// bpfIDs reads a process's eBPF objects' ids ("prog_id:", "link_id:")
// from its file descriptors' fdinfo.
func bpfIDs(t *testing.T, pid int, key string) []uint32 {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fdinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint32]bool{}
	var out []uint32
	for _, fd := range fds {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd.Name()))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, key); ok {
				id, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
				if err == nil && !seen[uint32(id)] {
					seen[uint32(id)] = true
					out = append(out, uint32(id))
				}
			}
		}
	}
	return out
}

// Without the rights eBPF needs, the kernel target is refused with what is
// missing, before anything runs: the command is not started.
func TestKernelUnprivileged(t *testing.T) {
	u := unprivileged(t)
	probe := filepath.Join(u.dir, "k.dpdf")
	os.WriteFile(probe, []byte("name = vmlinux\nmodtype = kernel\ntracepoint = syscalls:sys_enter_getppid\nexit 0\n"), 0o644)
	marker := filepath.Join(u.dir, "ran")
	exe, _ := os.Executable()
	_, errs, code := u.run(t, exe, "run", "--target", "kernel", probe, "--", "/bin/sh", "-c", "echo > "+marker)
	if code != 1 || !strings.Contains(errs, "eBPF: permission denied") || !strings.Contains(errs, "run as root (or with CAP_BPF and CAP_PERFMON)") {
		t.Fatalf("unprivileged run --target kernel: exit %d, standard error %q", code, errs)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran although the kernel target was refused")
	}
}
