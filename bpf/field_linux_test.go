//go:build linux

package bpf_test

import (
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/bpf"
	dpdfc "github.com/gprobes/gprobes/compiler" // bpf has a type compiler
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/rpn"
)

// compileProbe builds a one-probe kernel program from DPDF text whose
// probe keyword (tracepoint =, offset =, retprobe =) is in the text;
// header keywords may come anywhere (they are moved first); name and
// modtype are added when missing.
func compileProbe(t testing.TB, src string) *rpn.Program {
	t.Helper()
	var hdr, body []string
	for _, l := range strings.Split(src, "\n") {
		k := strings.ToLower(strings.TrimSpace(strings.SplitN(l, "=", 2)[0]))
		if strings.Contains(l, "=") && headerKeys[k] {
			hdr = append(hdr, l)
		} else {
			body = append(body, l)
		}
	}
	src = strings.Join(append(hdr, body...), "\n")
	if !strings.Contains(src, "name =") {
		src = "name = vmlinux\n" + src
	}
	if !strings.Contains(src, "modtype =") {
		src = "modtype = kernel\n" + src
	}
	f, err := dpdf.ParseSource("test.dpdf", []byte(src+"\n"), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	p, err := dpdfc.CompileProgram(f, rpn.CompileOptions{})
	if err != nil {
		var b strings.Builder
		dpdf.PrintError(&b, err, false)
		t.Fatalf("%s\n%s", b.String(), src)
	}
	return p
}

// format reads a live tracepoint format, skipping the test when tracefs
// cannot be read.
func format(t testing.TB, group, event string) *bpf.Format {
	t.Helper()
	f, err := bpf.ReadFormat(group, event)
	if err != nil {
		testkit.SkipOrFail(t, "%v", err)
	}
	return f
}

// readRecords reads n records from the ring of m.
func readRecords(t testing.TB, m *bpf.Maps, n int, during func()) []bpf.Record {
	t.Helper()
	rd, err := bpf.NewReader(m)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	during()
	var out []bpf.Record
	for len(out) < n {
		rd.SetDeadline(time.Now().Add(2 * time.Second))
		r, err := rd.Read()
		if err != nil {
			t.Fatalf("record %d of %d: %v", len(out), n, err)
		}
		out = append(out, r)
	}
	return out
}

func words(b []byte) []uint64 {
	var w []uint64
	for len(b) >= 8 {
		w = append(w, binary.LittleEndian.Uint64(b))
		b = b[8:]
	}
	return w
}

// The system call number of sys_enter_getppid, and the two common fields
// a program can have: common_type (the event's id) and common_pid (the
// thread's id).
func TestFieldGetppid(t *testing.T) {
	needBPF(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f := format(t, "syscalls", "sys_enter_getppid")
	p := compileProbe(t, "tracepoint = syscalls:sys_enter_getppid\npush field,__syscall_nr\npush field,common_type\npush field,common_pid\npush tid\nlog 4\nexit 1")
	tid := unix.Gettid()
	prog, m, _ := load(t, p, bpf.Options{Kind: bpf.KindTracepoint, Format: f, PID: uint32(os.Getpid()), TID: uint32(tid)})
	const n = 100
	recs := readRecords(t, m, n, func() {
		detach := attachGetppid(t, prog)
		getppid(n)
		detach()
	})
	for i, r := range recs {
		w := words(r.Log)
		if len(w) != 4 || w[0] != unix.SYS_GETPPID || w[1] != uint64(f.ID) || w[2] != uint64(tid) || w[3] != uint64(tid) {
			t.Fatalf("record %d: %d, want [%d %d %d %d]", i, w, unix.SYS_GETPPID, f.ID, tid, tid)
		}
	}
}

// openat's arguments: dfd and flags by value (-100 as the register holds
// it), the file name a user address read with log str; and fields this
// test adds to the format to reach the other code paths: a signed
// 32-bit load (sign-extended), an 8-bit one, and a misaligned signed
// 16-bit one (bpf_probe_read_kernel of the record, the kernel allowing
// only aligned loads from the context).
func TestFieldOpenat(t *testing.T) {
	needBPF(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f := format(t, "syscalls", "sys_enter_openat")
	dfd, _ := f.Field("dfd")
	f.Fields = append(f.Fields,
		bpf.Field{Name: "dfd32", Offset: dfd.Offset, Size: 4, Signed: true, Kind: bpf.FieldScalar},
		bpf.Field{Name: "dfd8", Offset: dfd.Offset, Size: 1, Kind: bpf.FieldScalar},
		bpf.Field{Name: "dfd16", Offset: dfd.Offset + 1, Size: 2, Signed: true, Kind: bpf.FieldScalar},
	)
	p := compileProbe(t, "tracepoint = syscalls:sys_enter_openat\n"+
		"push field,dfd\npush field,flags\npush field,mode\npush field,dfd32\npush field,dfd8\npush field,dfd16\nlog 6\n"+
		"push d,200\npush field,filename\nlog str\nexit 1")
	for _, loop := range []bool{false, true} {
		prog, m, c := load(t, p, bpf.Options{Kind: bpf.KindTracepoint, Format: f, PID: uint32(os.Getpid()), TID: uint32(unix.Gettid()), Loop: loop})
		const n = 50
		name := "/nonexistent/gprobes-field-test"
		recs := readRecords(t, m, n, func() {
			l, err := bpf.AttachTracepoint(prog, "syscalls", "sys_enter_openat")
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < n; i++ {
				unix.Openat(unix.AT_FDCWD, name, unix.O_RDONLY|unix.O_CLOEXEC, 0o640)
			}
			l.Close()
		})
		minus100 := uint64(0xffffffffffffff9c)
		want := []uint64{minus100, unix.O_RDONLY | unix.O_CLOEXEC, 0o640, minus100, 0x9c, ^uint64(0)}
		for i, r := range recs {
			w := words(r.Log[:48])
			if len(r.Log) != 48+len(name) || string(r.Log[48:]) != name || !equalWords(w, want) {
				t.Fatalf("loop mode %v, record %d: %#x %q, want %#x %q", c.Loop, i, w, r.Log[48:], want, name)
			}
		}
	}
}

func equalWords(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// An array field (sched_switch's prev_comm) is a kernel address in the
// event's record, which log mrf reads; prev_pid is the thread leaving
// the CPU: this one, put to sleep.
func TestFieldArray(t *testing.T) {
	needBPF(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f := format(t, "sched", "sched_switch")
	tid := unix.Gettid()
	comm, err := os.ReadFile("/proc/thread-self/comm")
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 16)
	copy(want, strings.TrimSpace(string(comm)))
	p := compileProbe(t, "tracepoint = sched:sched_switch\npush field,prev_pid\npush field,prev_comm\nlog 2\npush d,16\npush field,prev_comm\nlog mrf\nexit 1")
	prog, m, _ := load(t, p, bpf.Options{Kind: bpf.KindTracepoint, Format: f, PID: uint32(os.Getpid()), TID: uint32(tid)})
	const n = 20
	recs := readRecords(t, m, n, func() {
		l, err := bpf.AttachTracepoint(prog, "sched", "sched_switch")
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			ts := unix.NsecToTimespec(int64(100 * time.Microsecond))
			unix.Nanosleep(&ts, nil)
		}
		l.Close()
	})
	for i, r := range recs {
		w := words(r.Log[:16])
		if len(r.Log) != 32 || w[0] != uint64(tid) || w[1] < 0xffff800000000000 || string(r.Log[16:]) != string(want) {
			t.Fatalf("record %d: pid %d comm at %#x %q, want %d %q", i, w[0], w[1], r.Log[16:], tid, want)
		}
	}
	t.Logf("prev_comm %q at %#x (the record, a kernel address)", want, words(recs[0].Log)[1])
}

// A __data_loc string (sched_process_exec's filename), the new process's
// pid and its pid before exec, for a program this test starts.
func TestFieldDataLoc(t *testing.T) {
	needBPF(t)
	f := format(t, "sched", "sched_process_exec")
	p := compileProbe(t, "tracepoint = sched:sched_process_exec\npush field,pid\npush field,old_pid\nlog 2\npush d,4096\npush field,filename\nlog str\nexit 1")
	prog, m, _ := load(t, p, bpf.Options{Kind: bpf.KindTracepoint, Format: f})
	path := testkit.Tool(t, "true")
	rd, err := bpf.NewReader(m)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	l, err := bpf.AttachTracepoint(prog, "sched", "sched_process_exec")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var pids []int
	for i := 0; i < 5; i++ {
		cmd := exec.Command(path)
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, cmd.Process.Pid)
	}
	l.Close()
	found := map[int]bool{}
	for {
		rd.SetDeadline(time.Now().Add(500 * time.Millisecond))
		r, err := rd.Read()
		if err != nil {
			break
		}
		w := words(r.Log[:16])
		for _, pid := range pids {
			if w[0] == uint64(pid) {
				if w[1] != uint64(pid) || string(r.Log[16:]) != path || r.PID != uint32(pid) {
					t.Fatalf("pid %d: old_pid %d filename %q (record of %d), want %q", pid, w[1], r.Log[16:], r.PID, path)
				}
				found[pid] = true
			}
		}
	}
	if len(found) != len(pids) {
		t.Fatalf("records of %v, want %v", found, pids)
	}
}

// The record's first 8 bytes, its common fields in the format, are not
// what the format says when an eBPF program runs: the kernel writes the
// pt_regs pointer there first (perf_trace_run_bpf_submit,
// perf_call_bpf_enter). A field this test adds over them, read with
// bpf_probe_read_kernel (the verifier refuses loads below offset 8), is a
// kernel address: this is why common_flags and common_preempt_count are
// refused, and common_type and common_pid made otherwise.
func TestFieldCommonOverwritten(t *testing.T) {
	needBPF(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f := format(t, "syscalls", "sys_enter_getppid")
	f.Fields = append(f.Fields, bpf.Field{Name: "head", Offset: 0, Size: 8, Kind: bpf.FieldScalar})
	p := compileProbe(t, "tracepoint = syscalls:sys_enter_getppid\npush field,head\nlog 1\nexit 1")
	prog, m, _ := load(t, p, bpf.Options{Kind: bpf.KindTracepoint, Format: f, PID: uint32(os.Getpid()), TID: uint32(unix.Gettid())})
	recs := readRecords(t, m, 3, func() {
		detach := attachGetppid(t, prog)
		getppid(3)
		detach()
	})
	for _, r := range recs {
		if w := words(r.Log); w[0] < 0xffff800000000000 {
			t.Fatalf("the record's first 8 bytes: %#x, not a kernel address", w[0])
		}
	}
	t.Logf("the record's first 8 bytes: %#x", words(recs[0].Log)[0])
}

// What push field refuses, at the instruction's line.
func TestFieldRefused(t *testing.T) {
	f, err := bpf.ParseFormat("sched", "sched_switch", mustRead(t, "testdata/tracefmt/sched_sched_switch"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		src  string
		o    bpf.Options
		want string
	}{
		{"tracepoint = sched:sched_switch\nnop\npush field,next_pd\nexit 0", bpf.Options{Kind: bpf.KindTracepoint, Format: f},
			`not compiled for the kernel: probe 0 pc 0x0001 at test.dpdf:5:1: push field,next_pd: tracepoint sched:sched_switch has no field "next_pd" (did you mean next_pid?); its fields: prev_comm, prev_pid, prev_prio, prev_state, next_comm, next_pid, next_prio (and common_type, common_flags, common_preempt_count, common_pid)`},
		{"tracepoint = sched:sched_switch\npush field,common_flags\nexit 0", bpf.Options{Kind: bpf.KindTracepoint, Format: f},
			"push field,common_flags: an eBPF program cannot read it"},
		{"tracepoint = sched:sched_switch\npush field,next_pid\nexit 0", bpf.Options{Kind: bpf.KindTracepoint},
			"push field,next_pid: the event's format was not given (Options.Format)"},
		{"tracepoint = sched:sched_switch\npush field,next_pid\nexit 0", bpf.Options{Kind: bpf.KindRawTracepoint, Format: f},
			"push field needs a tracepoint probe (tracepoint = SUBSYS:EVENT); this one is a raw tracepoint"},
	} {
		p := compileProbe(t, c.src)
		_, err := bpf.CompileProbe(p, 0, c.o)
		var u *bpf.Unsupported
		if !errors.As(err, &u) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.src, err, c.want)
		}
	}
}

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// log mrf of an array field right after its push field and a constant
// length is copied from the context (ctxlog.go), not read through
// bpf_probe_read_kernel; the same bytes either way, the log cut at
// logmax alike. The helper is there when the log mrf is a jump target.
func TestFieldArrayFromContext(t *testing.T) {
	needBPF(t)
	f := format(t, "sched", "sched_switch")
	for _, c := range []struct {
		name, src string
		helper    bool
		n         int // bytes of the comm logged
		truncated bool
	}{
		{"context", "push d,16\npush field,prev_comm\nlog mrf\nexit 1", false, 16, false},
		{"jump target", "push d,16\npush field,prev_comm\njmp l\nl: log mrf\nexit 1", true, 16, false},
		{"cut at logmax", "logmax = 12\npush d,8\nlog 1\npush d,16\npush field,prev_comm\nlog mrf\nexit 1", false, 4, true},
		{"part of it", "push d,5\npush field,prev_comm\nlog mrf\nexit 1", false, 5, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			tid := unix.Gettid()
			comm, err := os.ReadFile("/proc/thread-self/comm")
			if err != nil {
				t.Fatal(err)
			}
			want := make([]byte, 16)
			copy(want, strings.TrimSpace(string(comm)))
			p := compileProbe(t, "tracepoint = sched:sched_switch\n"+c.src)
			prog, m, cp := load(t, p, bpf.Options{Kind: bpf.KindTracepoint, Format: f, PID: uint32(os.Getpid()), TID: uint32(tid)})
			helper := false
			for _, in := range cp.Spec.Instructions {
				if in.IsBuiltinCall() && asm.BuiltinFunc(in.Constant) == asm.FnProbeReadKernel {
					helper = true
				}
			}
			if helper != c.helper {
				t.Errorf("bpf_probe_read_kernel in the program: %v, want %v", helper, c.helper)
			}
			recs := readRecords(t, m, 3, func() {
				l, err := bpf.AttachTracepoint(prog, "sched", "sched_switch")
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i < 3; i++ {
					ts := unix.NsecToTimespec(int64(100 * time.Microsecond))
					unix.Nanosleep(&ts, nil)
				}
				l.Close()
			})
			for i, r := range recs {
				log := want[:c.n]
				if c.name == "cut at logmax" {
					// the word 8, then 4 of the comm's 16 bytes
					log = append(binary.LittleEndian.AppendUint64(nil, 8), want[:4]...)
				}
				if string(r.Log) != string(log) || r.Truncated != c.truncated {
					t.Fatalf("record %d: %q truncated %v, want %q truncated %v", i, r.Log, r.Truncated, log, c.truncated)
				}
			}
		})
	}
}
