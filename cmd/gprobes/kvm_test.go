package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/daemon"
	"github.com/gprobes/gprobes/internal/testkit"
)

// A stateful kernel trace of a VMM's port IO on a real vCPU: testdata/kvm/vmm.c,
// a minimal VMM, and testdata/examples/kvm_pio.dpdf, a stateful trace over
// the kvm:kvm_pio and kvm:kvm_userspace_exit tracepoints.

const kvmPioExample = examples + "/kvm_pio.dpdf"

// needKVM skips the test (fails it under CI=true) unless /dev/kvm opens.
func needKVM(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		testkit.SkipOrFail(t, "no usable KVM: %v", err)
		return
	}
	f.Close()
}

// buildVMM builds testdata/kvm/vmm.c once per test binary (gcc, no
// libraries) and checks that /dev/kvm is there to run it.
func buildVMM(t *testing.T) string {
	t.Helper()
	needKVM(t)
	return testkit.CC(t, "vmm", "-O2", "-Wall", "-Werror", "../../testdata/kvm/vmm.c")
}

// vmmCounts is the VMM's one line at its hlt.
type vmmCounts struct {
	Pid                       int
	Before, Inside, After, In uint64
	Runs, EINTR               uint64
}

var vmmLine = regexp.MustCompile(`^pid=(\d+) before=(\d+) inside=(\d+) after=(\d+) in=(\d+) runs=(\d+) eintr=(\d+)$`)

// parseVMM finds the VMM's line in out.
func parseVMM(out string) (vmmCounts, bool) {
	for _, l := range strings.Split(out, "\n") {
		m := vmmLine.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		var n [7]uint64
		for i := range n {
			n[i], _ = strconv.ParseUint(m[i+1], 10, 64)
		}
		return vmmCounts{Pid: int(n[0]), Before: n[1], Inside: n[2], After: n[3], In: n[4], Runs: n[5], EINTR: n[6]}, true
	}
	return vmmCounts{}, false
}

// runVMM runs "vmm args..." and returns its counts.
func runVMM(t *testing.T, vmm string, args ...uint64) vmmCounts {
	t.Helper()
	var s []string
	for _, a := range args {
		s = append(s, fmt.Sprint(a))
	}
	out, err := exec.Command(vmm, s...).CombinedOutput()
	if err != nil {
		t.Fatalf("vmm %s: %v\n%s", strings.Join(s, " "), err, out)
	}
	c, ok := parseVMM(string(out))
	if !ok {
		t.Fatalf("vmm %s printed no counts:\n%s", strings.Join(s, " "), out)
	}
	return c
}

// The fixture itself, without gprobes: each phase's writes exactly as
// asked, one KVM_RUN return per port access and one for the hlt; bad
// arguments are refused with status 2.
func TestVMM(t *testing.T) {
	vmm := buildVMM(t)
	for _, a := range [][4]uint64{{0, 0, 0, 0}, {3, 5, 2, 4}, {1000, 20000, 1000, 0}} {
		n, m, k, in := a[0], a[1], a[2], a[3]
		c := runVMM(t, vmm, n, m, k, in)
		if c.Before != n || c.Inside != m || c.After != k || c.In != in {
			t.Errorf("vmm %d %d %d %d: %+v", n, m, k, in, c)
		}
		if want := n + m + k + in + 3 + c.EINTR; c.Runs != want {
			t.Errorf("vmm %d %d %d %d: %d returns of KVM_RUN, want %d", n, m, k, in, c.Runs, want)
		}
	}
	for _, args := range [][]string{{}, {"1", "2"}, {"1", "x", "3"}, {"1", "2", "-3"}, {"1", "2", "3", "4", "5"}, {"0x10000000", "0", "0"}} {
		err := exec.Command(vmm, args...).Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("vmm %q: %v, want exit status 2", args, err)
		}
	}
}

// The example is a valid DPDF: two tracepoint probes reading three fields.
func TestKVMPioExampleChecks(t *testing.T) {
	out := mustRun(t, "check", kvmPioExample)
	if !strings.Contains(out, "2 probes") {
		t.Errorf("check: %s", out)
	}
	dis := mustRun(t, "disasm", kvmPioExample)
	for _, want := range []string{"tracepoint = kvm:kvm_pio", "tracepoint = kvm:kvm_userspace_exit", "push field,port", "push field,val", "push field,rw"} {
		if !strings.Contains(dis, want) {
			t.Errorf("disasm lacks %q:\n%s", want, dis)
		}
	}
}

// probeRows reads the probe table run prints at its end: per minor, the
// named columns, cut where the header's columns start (a column may hold
// spaces: LOCATION "tracepoint kvm:kvm_pio").
func probeRows(out string) map[uint16]map[string]string {
	rows := map[uint16]map[string]string{}
	var cols []string
	var starts []int
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "TARGET ") {
			cols, starts = nil, nil
			for i := 0; i < len(line); {
				if line[i] == ' ' {
					i++
					continue
				}
				j := strings.IndexByte(line[i:], ' ')
				if j < 0 {
					j = len(line) - i
				}
				cols, starts = append(cols, line[i:i+j]), append(starts, i)
				i += j
			}
			continue
		}
		if cols == nil || len(line) < starts[len(starts)-1] {
			continue
		}
		row := map[string]string{}
		for i, c := range cols {
			end := len(line)
			if i+1 < len(cols) {
				end = min(starts[i+1], len(line))
			}
			row[c] = strings.TrimSpace(line[starts[i]:end])
		}
		if m, err := strconv.ParseUint(row["MINOR"], 10, 16); err == nil {
			rows[uint16(m)] = row
		}
	}
	return rows
}

// gprobes run --target kernel testdata/examples/kvm_pio.dpdf -- vmm N M K:
// the stateful trace on a real vCPU. Exactly the M writes inside the
// window are logged, port 0x20 and values N+1 ... N+M, by the VMM's
// process; lv 1 counts the N+K outside it, lv 2 the returns to user space
// (as many as the VMM's KVM_RUN calls returned, which bpftrace counts on
// kvm:kvm_userspace_exit too); the probes' hits are the kernel's events of
// that VMM, while another one runs outside the command all along.
func TestKernelKVMPio(t *testing.T) {
	if os.Geteuid() != 0 {
		testkit.SkipOrFail(t, "the kernel target needs root (BPF), euid %d", os.Geteuid())
	}
	vmm := buildVMM(t)
	const n, m, k = 300, 10000, 200
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// another VM meanwhile, outside COMMAND's process: inside its window
	// all along (it writes to port 0x20 until it is killed), it would
	// open the window, log its writes and add to the counts if run did
	// not probe COMMAND's process alone
	other := exec.Command(vmm, "1", "0x0fffffff", "1")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	otherEnded := make(chan error, 1)
	go func() { otherEnded <- other.Wait() }()
	defer func() { other.Process.Kill(); <-otherEnded }()
	// running its vCPU before run starts: its vCPU's file is open
	testkit.Wait(t, time.Minute, "the other VMM's vCPU", func() (bool, string) {
		ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", other.Process.Pid))
		var links []string
		for _, e := range ents {
			l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", other.Process.Pid, e.Name()))
			if strings.Contains(l, "kvm-vcpu") {
				return true, ""
			}
			links = append(links, l)
		}
		return false, strings.Join(links, " ")
	})
	// this test binary as gprobes (TestMain): the VMM's line comes out
	// on the same standard output as the records and the summary
	cmd := exec.CommandContext(ctx, os.Args[0], "run", "--target", "kernel", "--json", kvmPioExample,
		"--", vmm, fmt.Sprint(n), fmt.Sprint(m), fmt.Sprint(k))
	cmd.Env = append(os.Environ(), "GPROBES_TEST_MAIN=1")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	select {
	case e := <-otherEnded:
		otherEnded <- e
		t.Errorf("the other VMM ended before the run did: %v", e)
	default:
	}
	out := stdout.String()
	show := func() string {
		if len(out) > 4000 {
			return out[:2000] + "\n...\n" + out[len(out)-2000:] + "\nstderr:\n" + stderr.String()
		}
		return out + "\nstderr:\n" + stderr.String()
	}
	if err != nil {
		t.Fatalf("gprobes run --target kernel: %v\n%s", err, show())
	}
	if strings.Contains(stderr.String(), "refused") {
		t.Errorf("a probe was refused:\n%s", stderr.String())
	}
	c, ok := parseVMM(out)
	if !ok {
		t.Fatalf("the VMM printed no counts:\n%s", show())
	}
	if c.Before != n || c.Inside != m || c.After != k || c.In != 0 || c.Runs != n+m+k+3+c.EINTR {
		t.Fatalf("the VMM under probes: %+v", c)
	}

	// the records: M, all of the window, in the VMM's process
	seen := make([]int, m)
	var records, bad int
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "{") {
			continue
		}
		records++
		var r daemon.LogLine
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		d, err := hex.DecodeString(r.Data)
		if r.Kind != "log" || r.Module != "vmlinux" || r.Major != 3 || r.Minor != 1 || r.Exit != 1 ||
			r.Pid != c.Pid || r.Truncated || err != nil || len(d) != 16 {
			if bad++; bad <= 5 {
				t.Errorf("record %s", l)
			}
			continue
		}
		port, val := binary.LittleEndian.Uint64(d), binary.LittleEndian.Uint64(d[8:])
		if port != 0x20 || val <= n || val > n+m {
			if bad++; bad <= 5 {
				t.Errorf("record of port %#x value %d, want port 0x20, value %d to %d: %s", port, val, n+1, n+m, l)
			}
			continue
		}
		seen[val-n-1]++
	}
	if records != m {
		t.Errorf("%d records, want %d", records, m)
	}
	for i, s := range seen {
		if s != 1 {
			t.Errorf("value %d logged %d times", n+1+i, s)
			if bad++; bad > 10 {
				break
			}
		}
	}

	// the variables: inside back at 0, the N+K ignored, every return
	lv := regexp.MustCompile(`(?m) vmlinux: lv 0=(\d+) 1=(\d+) 2=(\d+)$`).FindStringSubmatch(out)
	if lv == nil {
		t.Fatalf("no variables line for vmlinux:\n%s", show())
	}
	if want := []string{"0", fmt.Sprint(n + k), fmt.Sprint(c.Runs)}; lv[1] != want[0] || lv[2] != want[1] || lv[3] != want[2] {
		t.Errorf("lv 0=%s 1=%s 2=%s, want 0=%s 1=%s 2=%s", lv[1], lv[2], lv[3], want[0], want[1], want[2])
	}

	// the probes: one hit per event of the VMM, no faults
	rows := probeRows(out)
	for minor, want := range map[uint16]uint64{1: n + m + k + 2, 2: c.Runs} {
		row := rows[minor]
		if row == nil {
			t.Errorf("no probe of minor %d in the summary:\n%s", minor, show())
			continue
		}
		if row["HITS"] != fmt.Sprint(want) || row["FAULTS"] != "0" || row["LOST"] != "0" {
			t.Errorf("probe %d: hits %s faults %s lost %s, want %d hits, no faults, none lost", minor, row["HITS"], row["FAULTS"], row["LOST"], want)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", show())
	}
}
