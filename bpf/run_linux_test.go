//go:build linux

package bpf_test

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/rpn"
)

// getppid calls getppid n times on the calling thread.
func getppid(n int) {
	for i := 0; i < n; i++ {
		unix.Getppid()
	}
}

// attachGetppid attaches prog to syscalls:sys_enter_getppid until the
// test ends (or the returned function is called).
func attachGetppid(t testing.TB, prog *ebpf.Program) func() {
	t.Helper()
	l, err := bpf.AttachTracepoint(prog, "syscalls", "sys_enter_getppid")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return func() { l.Close() }
}

// The counting probe on syscalls:sys_enter_getppid, restricted to this
// thread by the compiler's filter (Options.PID, Options.TID): lv 0 is
// exactly the calls made.
func TestCountGetppid(t *testing.T) {
	needBPF(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	p := compileSrc(t, "vars = 1\ninc lv,0\nexit 0")
	prog, m, _ := load(t, p, bpf.Options{PID: uint32(os.Getpid()), TID: uint32(unix.Gettid())})
	detach := attachGetppid(t, prog)
	const n = 12345
	getppid(n)
	detach()
	lv, err := m.Vars(false)
	if err != nil {
		t.Fatal(err)
	}
	cn, err := m.ProbeCounters(0)
	if err != nil {
		t.Fatal(err)
	}
	if lv[0] != n || cn.Runs != n || cn.Hits != n || cn.Skipped != 0 || cn.Faults != 0 {
		t.Fatalf("lv 0 = %d, counters %+v: want %d", lv[0], cn, n)
	}
}

// The same count with the filter written in RPN, while another thread of
// the test calls getppid too: only this thread's calls count, and the
// other thread's hits run the program (counted as runs) but skip the inc.
func TestCountGetppidRPNFilter(t *testing.T) {
	needBPF(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	src := fmt.Sprintf("vars = 1\npush pid\npush d,%d\nsub\njnz out\npush tid\npush d,%d\nsub\njnz out\ninc lv,0\nout: exit 0", os.Getpid(), unix.Gettid())
	p := compileSrc(t, src)
	prog, m, _ := load(t, p, bpf.Options{})
	attachGetppid(t, prog)
	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		runtime.LockOSThread()
		n := 0
		for {
			select {
			case <-stop:
				done <- n
				return
			default:
			}
			getppid(100)
			n += 100
		}
	}()
	const n = 20000
	getppid(n)
	close(stop)
	other := <-done
	lv, err := m.Vars(false)
	if err != nil {
		t.Fatal(err)
	}
	cn, _ := m.ProbeCounters(0)
	if lv[0] != n || cn.Runs < n+uint64(other) {
		t.Fatalf("lv 0 = %d (want %d), %d runs (at least %d: the other thread made %d calls)", lv[0], n, cn.Runs, n+other, other)
	}
	t.Logf("lv 0 = %d; %d runs, the other thread's %d calls among them", lv[0], cn.Runs, other)
}

// A logging probe: one record per call, with the pid and tid logged and
// in its header.
func TestLogGetppid(t *testing.T) {
	needBPF(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid, tid := uint32(os.Getpid()), uint32(unix.Gettid())
	p := compileSrc(t, "major = 7\nminor = 9\npush pid\npush tid\nlog 2\nexit 1")
	prog, m, _ := load(t, p, bpf.Options{Probe: 0, PID: pid, TID: tid})
	rd, err := bpf.NewReader(m)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	detach := attachGetppid(t, prog)
	const n = 5000
	before := uint64(time.Now().UnixNano())
	getppid(n)
	after := uint64(time.Now().UnixNano())
	detach()
	var last uint64
	for i := 0; i < n; i++ {
		rd.SetDeadline(time.Now().Add(2 * time.Second))
		r, err := rd.Read()
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		want := binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, uint64(pid)), uint64(tid))
		if r.PID != pid || r.TID != tid || string(r.Log) != string(want) || r.Exit != 1 || r.Major != 7 || r.Minor != 9 || r.Exception != 0 {
			t.Fatalf("record %d: %+v, want pid %d tid %d", i, r, pid, tid)
		}
		// the clock: Unix time, in order, within the calls (a few us of
		// slack for the offset's own error)
		if r.TS < last || r.TS+100000 < before || r.TS > after+100000 {
			t.Fatalf("record %d: ts %d, calls from %d to %d, previous %d", i, r.TS, before, after, last)
		}
		last = r.TS
	}
	if rd.Available() != 0 {
		t.Fatalf("%d bytes of records more than the calls", rd.Available())
	}
	if cn, _ := m.ProbeCounters(0); cn.Runs != n || cn.Lost != 0 {
		t.Fatalf("counters %+v", cn)
	}
}

// Exceptions in the kernel: records with the exception, the RPN pc of
// the instruction (and so its DPDF line), the address; faults counted.
func TestExceptions(t *testing.T) {
	needBPF(t)
	for _, c := range []struct {
		name, src string
		ex        rpn.Exception
		line      int // of the faulting instruction in test.dpdf
		addr      uint64
	}{
		{"divide by zero", "push d,1\npush d,0\ndiv\nexit 1", rpn.ExDivideByZero, 6, 0},
		{"max jumps", "jmpmax = 100\nl: nop\njmp l", rpn.ExMaxJumps, 6, 0},
		{"invalid address", "push d,1\npush d,0\npush mrf\nexit 1", rpn.ExInvalidAddress, 6, 0},
		{"invalid kernel address", "push d,0xfffffffffffff008\npush mrf,4\nexit 1", rpn.ExInvalidAddress, 5, 0xfffffffffffff008},
		{"call depth", "f: call f\nexit 1", rpn.ExCallDepth, 4, 0},
		{"invalid operand", "vars = 2\npush d,5\npush lv\nexit 1", rpn.ExInvalidOperand, 6, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			p := compileSrc(t, c.src)
			prog, m, cp := load(t, p, bpf.Options{PID: uint32(os.Getpid()), TID: uint32(unix.Gettid())})
			rd, err := bpf.NewReader(m)
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			detach := attachGetppid(t, prog)
			getppid(3)
			detach()
			var pos rpn.Pos
			for i := 0; i < 3; i++ {
				rd.SetDeadline(time.Now().Add(time.Second))
				r, err := rd.Read()
				if err != nil {
					t.Fatal(err)
				}
				pos, _ = p.Module().LineFor(r.PC)
				if r.Exception != c.ex || int(pos.Line) != c.line || r.Addr != c.addr || len(r.Log) != 0 {
					t.Fatalf("record %+v (line %d), want %v at line %d addr %#x\n%s", r, pos.Line, c.ex, c.line, c.addr, p.Listing(0))
				}
			}
			if cn, _ := m.ProbeCounters(0); cn.Faults != 3 || cn.Runs != 3 {
				t.Fatalf("counters %+v", cn)
			}
			t.Logf("%v at %s (loop mode %v)", c.ex, p.Module().PosString(pos), cp.Loop)
		})
	}
}

// A minimal hand-written counter: one atomic add to a one-entry array,
// the floor any counting probe on the tracepoint stands on.
func minimalCounter(t testing.TB) (*ebpf.Program, *ebpf.Map) {
	t.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	ld := asm.LoadMapValue(asm.R1, 0, 0)
	if err := ld.AssociateMap(m); err != nil {
		t.Fatal(err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:    ebpf.TracePoint,
		License: "GPL",
		Instructions: asm.Instructions{
			ld,
			asm.Mov.Imm(asm.R2, 1),
			asm.AddAtomic.Mem(asm.R1, asm.R2, asm.DWord, 0),
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prog.Close() })
	return prog, m
}

// nsPerCall is the best of rounds of n getppid calls.
func nsPerCall(n, rounds int) float64 {
	best := 0.0
	for r := 0; r < rounds; r++ {
		start := time.Now()
		getppid(n)
		ns := float64(time.Since(start).Nanoseconds()) / float64(n)
		if r == 0 || ns < best {
			best = ns
		}
	}
	return best
}

// The cost of a hit: getppid natively, with the minimal hand-written
// counter, with gprobes' counting probe (unfiltered, and with the
// compiler's pid filter), and with a logging probe, all in one run on one
// thread, each the best of 5 rounds of 200,000 calls (so run it once):
//
//	go test -run '^$' -bench GetppidCost -benchtime 1x -v ./bpf/
func BenchmarkGetppidCost(b *testing.B) {
	t := b
	needBPF(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const n, rounds = 200000, 5
	var out strings.Builder
	// the programs' own time (BPF_STATS_RUN_TIME), less noisy than the
	// system call's on a shared machine
	if st, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME)); err == nil {
		defer st.Close()
	} else {
		t.Logf("no program's own time: %v", err)
	}
	native := nsPerCall(n, rounds)
	fmt.Fprintf(&out, "getppid native                 %6.1f ns\n", native)
	row := func(name string, prog *ebpf.Program) float64 {
		detach := attachGetppid(t, prog)
		ns := nsPerCall(n, rounds)
		detach()
		own := ""
		if s, err := prog.Stats(); err == nil && s.RunCount > 0 && s.Runtime > 0 {
			own = fmt.Sprintf(", the program's own %.1f ns a run", float64(s.Runtime.Nanoseconds())/float64(s.RunCount))
		}
		fmt.Fprintf(&out, "%-30s %6.1f ns  (+%.1f per hit%s)\n", name, ns, ns-native, own)
		return ns - native
	}
	floorProg, _ := minimalCounter(t)
	floor := row("minimal counter (hand-written)", floorProg)
	p := compileSrc(t, "vars = 1\ninc lv,0\nexit 0")
	prog, _, _ := load(t, p, bpf.Options{})
	count := row("gprobes inc lv,0; exit 0", prog)
	prog2, _, _ := load(t, p, bpf.Options{PID: uint32(os.Getpid())})
	row("  with the pid filter", prog2)
	// branches, loops and calls (doc.go, "Verification cost": the joins'
	// stores and loads; loop mode's region function call per iteration)
	var dia strings.Builder
	for i := 0; i < 60; i++ {
		fmt.Fprintf(&dia, "push u,rdi\nshr %d\npush d,1\nand\njz l%d\ninc lv,0\nl%d: nop\n", i%64, i, i)
	}
	for _, c := range []struct{ name, src string }{
		{"60 diamonds (straight)", "vars = 1\n" + dia.String() + "exit 0"},
		{"60 diamonds logging", "vars = 1\n" + strings.ReplaceAll(dia.String(), "inc lv,0", "push d,1\nlog 1") + "exit 0"},
		{"loop of 10 (loop mode)", "vars = 1\npush d,10\nl: inc lv,0\nloop l\nexit 0"},
		{"2 calls (loop mode)", "vars = 1\ncall f\ncall f\nexit 0\nf: inc lv,0\nret"},
	} {
		prog, _, _ := load(t, compileSrc(t, c.src), bpf.Options{PID: uint32(os.Getpid())})
		row(c.name, prog)
	}
	lp := compileSrc(t, "push pid\npush tid\nlog 2\nexit 1")
	prog3, m3, _ := load(t, lp, bpf.Options{PID: uint32(os.Getpid())})
	// a reader drains the ring meanwhile, on another thread (and CPU, if
	// there is one)
	rd, err := bpf.NewReader(m3)
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan int)
	go func() {
		n := 0
		for {
			if _, err := rd.Read(); err != nil {
				read <- n
				return
			}
			n++
		}
	}()
	row("push pid; push tid; log 2; exit 1", prog3)
	rd.Close()
	records := <-read
	// the same with a wakeup per record
	prog4, m4, _ := load(t, lp, bpf.Options{PID: uint32(os.Getpid()), Wakeup: -1})
	rd4, err := bpf.NewReader(m4)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			if _, err := rd4.Read(); err != nil {
				read <- 0
				return
			}
		}
	}()
	row("  waking the reader per record", prog4)
	rd4.Close()
	<-read
	if ns, err := bpftraceCount(func() float64 { return nsPerCall(n, rounds) }); err == nil {
		fmt.Fprintf(&out, "%-30s %6.1f ns  (+%.1f per hit)\n", "bpftrace @c = count()", ns, ns-native)
	} else {
		fmt.Fprintf(&out, "bpftrace: %v\n", err)
	}
	// the native figure again, for drift
	fmt.Fprintf(&out, "getppid native again           %6.1f ns\n", nsPerCall(n, rounds))
	fmt.Fprintf(&out, "counting probe / floor: %.2f (per hit)", count/floor)
	t.Log("\n" + out.String())
	cn, _ := m3.ProbeCounters(0)
	t.Logf("logging probe: %d runs, %d records read, %d lost (ring full)", cn.Runs, records, cn.Lost)
}

// The programs' own time a hit (BPF_STATS_RUN_TIME: the kernel's count of
// the time each program ran), less noisy than the system call's on a
// shared machine, for programs of straight and loop mode: the joins'
// stores and loads, loop mode's call of a region per iteration. The best
// of 5 loads of 100,000 calls each (so run it once):
//
//	go test -run '^$' -bench ProgramCost -benchtime 1x -v ./bpf/
func BenchmarkProgramCost(b *testing.B) {
	t := b
	needBPF(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	st, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		t.Fatalf("no program's own time: %v", err)
	}
	defer st.Close()
	var dia strings.Builder
	for i := 0; i < 60; i++ {
		fmt.Fprintf(&dia, "push d,%d\nshr %d\npush d,1\nand\njz l%d\ninc lv,0\nl%d: nop\n", 0x5555555555555555>>(i%3), i%64, i, i)
	}
	var lg strings.Builder
	for i := 0; i < 20; i++ {
		fmt.Fprintf(&lg, "push d,%d\nlog 1\n", i)
	}
	var out strings.Builder
	for _, c := range []struct{ name, src string }{
		{"inc lv,0; exit 0", "vars = 1\ninc lv,0\nexit 0"},
		{"push pid tid; log 2; exit 1", "push pid\npush tid\nlog 2\nexit 1"},
		{"60 diamonds (straight)", "vars = 1\n" + dia.String() + "exit 0"},
		{"60 diamonds logging (straight)", "vars = 1\n" + strings.ReplaceAll(dia.String(), "inc lv,0", "push d,1\nlog 1") + "exit 0"},
		{"20 logs (straight)", lg.String() + "exit 0"},
		{"loop of 10 (loop mode)", "vars = 1\npush d,10\nl: inc lv,0\nloop l\nexit 0"},
		{"loop of 100 (loop mode)", "vars = 1\npush d,100\nl: inc lv,0\nloop l\nexit 0"},
		{"2 calls (loop mode)", "vars = 1\ncall f\ncall f\nexit 0\nf: inc lv,0\nret"},
	} {
		best := 0.0
		for r := 0; r < 5; r++ {
			prog, _, _ := load(t, compileSrc(t, c.src), bpf.Options{PID: uint32(os.Getpid())})
			detach := attachGetppid(t, prog)
			getppid(100000)
			detach()
			s, err := prog.Stats()
			if err != nil || s.RunCount == 0 {
				t.Fatalf("stats %+v: %v", s, err)
			}
			ns := float64(s.Runtime.Nanoseconds()) / float64(s.RunCount)
			if r == 0 || ns < best {
				best = ns
			}
			prog.Close()
		}
		fmt.Fprintf(&out, "%-32s %7.1f ns\n", c.name, best)
	}
	t.Log("the program's own time a hit, best of 5:\n" + out.String())
}

// bpftraceCount runs measure with bpftrace counting the same tracepoint
// (a per-CPU map of its own), when bpftrace is installed.
func bpftraceCount(measure func() float64) (float64, error) {
	path, err := exec.LookPath("bpftrace")
	if err != nil {
		return 0, err
	}
	cmd := exec.Command(path, "-e", "tracepoint:syscalls:sys_enter_getppid { @c = count(); }")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer cmd.Wait()
	defer cmd.Process.Signal(os.Interrupt)
	attached := make(chan bool)
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			if !sent && strings.Contains(sc.Text(), "Attaching") {
				attached <- true
				sent = true
			}
		}
		if !sent {
			attached <- false
		}
	}()
	select {
	case ok := <-attached:
		if !ok {
			return 0, fmt.Errorf("bpftrace did not attach")
		}
	case <-time.After(30 * time.Second):
		return 0, fmt.Errorf("bpftrace did not attach in 30 s")
	}
	time.Sleep(500 * time.Millisecond) // it says so before it has
	return measure(), nil
}

// BenchmarkGetppid: ns per getppid natively and with the probes attached.
func BenchmarkGetppid(b *testing.B) {
	needBPF(b)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.Run("native", func(b *testing.B) { getppid(b.N) })
	floorProg, _ := minimalCounter(b)
	p := compileSrc(b, "vars = 1\ninc lv,0\nexit 0")
	prog, _, _ := load(b, p, bpf.Options{})
	for _, c := range []struct {
		name string
		prog *ebpf.Program
	}{{"minimal-counter", floorProg}, {"gprobes-count", prog}} {
		b.Run(c.name, func(b *testing.B) {
			detach := attachGetppid(b, c.prog)
			defer detach()
			b.ResetTimer()
			getppid(b.N)
		})
	}
}
