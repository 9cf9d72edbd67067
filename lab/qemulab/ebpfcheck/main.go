// Command ebpfcheck proves that eBPF function probes work in the kernel it
// runs on, independently of gprobes: it attaches small counting programs
// (built with cilium/ebpf's asm package, no clang) to one kernel function as
// a kprobe at its entry, a kprobe at an instruction boundary inside it, a
// kretprobe, an fentry and an fexit (and a tracepoint, kprobe.multi and a
// kprobe off an instruction boundary when asked), runs a workload that calls
// the function an exact number of times, and prints the counts, with the
// time each program took to load (the verifier) and to attach, and the cost
// per call of each probe. It is run inside the QEMU lab's guest (TCG) by
// lab/qemulab's TestEBPF, built statically; see docs/qemu-lab.md.
//
//	ebpfcheck [-fn __x64_sys_getppid] [-n 1000] [-work getppid|read:PATH|statfs:PATH|sh:CMD]
//	          [-want N] [-probes kprobe,kprobe-off,kretprobe,fentry,fexit] [-off BYTES]
//
// Each program counts every hit and, separately, the hits in this process
// (its tgid): the in-process workloads (getppid: the system call N times;
// read:PATH: N times open, one read, close; statfs:PATH: N statfs calls)
// are checked against the own count, sh:CMD (run once with /bin/sh -c) against
// the count of all hits. -want is the expected count (default N).
//
// Output, one line each:
//
//	EBPFCHECK fn __x64_sys_getppid addr 0xffffffff810be3a0 aliases __do_sys_getppid,__ia32_sys_getppid
//	EBPFCHECK insn +0 0f1f440000 nopl (%rax,%rax)
//	EBPFCHECK insn +5 53 push %rbx
//	EBPFCHECK insn +6 e805590700 callq 0xffffffff81133cb0
//	EBPFCHECK offset 6
//	EBPFCHECK btf 107.27ms
//	EBPFCHECK fentry target __do_sys_getppid (the BTF name at 0xffffffff810be3a0)
//	EBPFCHECK native ns/call 534.8
//	EBPFCHECK probe kprobe load 6.31ms attach 12.44ms hits 1000 own 1000 ns/call 1517.6
//	EBPFCHECK probe kprobe-multi unsupported: ...
//	EBPFCHECK all kprobe 1000 kprobe-off 1000 kretprobe 1000 fentry 1000 fexit 1000
//	EBPFCHECK ok        (or EBPFCHECK FAIL ..., exit status 1)
package main

import (
	"debug/elf"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/arch/x86/x86asm"
	"golang.org/x/sys/unix"
)

var (
	fnFlag     = flag.String("fn", "__x64_sys_getppid", "kernel function to probe (core kernel or a loaded module)")
	nFlag      = flag.Int("n", 1000, "calls the workload makes")
	workFlag   = flag.String("work", "getppid", "workload: getppid, read:PATH, statfs:PATH or sh:CMD")
	wantFlag   = flag.Int("want", -1, "expected hits of each probe (default -n)")
	probesFlag = flag.String("probes", "kprobe,kprobe-off,kretprobe,fentry,fexit",
		"comma-separated: kprobe, kprobe-off, kretprobe, fentry, fexit, tracepoint:GROUP/EVENT, kprobe-multi, kprobe-badoff")
	offFlag = flag.Int("off", -1, "offset for kprobe-off (default: chosen by decoding the live text)")
	allFlag = flag.Bool("all", true, "also run the workload once with every attachable probe attached at once")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Printf("EBPFCHECK FAIL %v\n", err)
		os.Exit(1)
	}
}

var failed []string

func failf(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	failed = append(failed, s)
	fmt.Printf("EBPFCHECK mismatch %s\n", s)
}

func run() error {
	fn, n := *fnFlag, *nFlag
	want := *wantFlag
	if want < 0 {
		want = n
	}
	work, own, err := workload(*workFlag, n)
	if err != nil {
		return err
	}
	kinds := strings.Split(*probesFlag, ",")

	addr, mod, aliases, err := kallsym(fn)
	if err != nil {
		return err
	}
	fmt.Printf("EBPFCHECK fn %s addr %#x", fn, addr)
	if mod != "" {
		fmt.Printf(" module %s", mod)
	}
	if len(aliases) > 0 {
		fmt.Printf(" aliases %s", strings.Join(aliases, ","))
	}
	fmt.Println()
	off := *offFlag
	if off < 0 && (has(kinds, "kprobe-off") || has(kinds, "kprobe-badoff")) {
		o, bad, err := chooseOffset(addr)
		if err != nil {
			return err
		}
		off = o
		if has(kinds, "kprobe-badoff") {
			badOff = bad
		}
	}
	if off >= 0 {
		fmt.Printf("EBPFCHECK offset %d\n", off)
	}
	btfName := fn
	if has(kinds, "fentry") || has(kinds, "fexit") {
		t0 := time.Now()
		spec, err := btf.LoadKernelSpec()
		if err != nil {
			return fmt.Errorf("kernel BTF: %w", err)
		}
		if mod != "" {
			if spec, err = btf.LoadKernelModuleSpec(mod); err != nil {
				return fmt.Errorf("BTF of module %s: %w", mod, err)
			}
		}
		fmt.Printf("EBPFCHECK btf %v\n", ms(time.Since(t0)))
		// fentry attaches to a BTF function. A symbol that is an alias (the
		// x86 syscall stubs of SYSCALL_DEFINE0: __x64_sys_getppid is an
		// alias of __do_sys_getppid) has no BTF entry of its own: take the
		// alias at the same address that has one.
		btfName = ""
		for _, name := range append([]string{fn}, aliases...) {
			var f *btf.Func
			if spec.TypeByName(name, &f) == nil {
				btfName = name
				break
			}
		}
		if btfName == "" {
			return fmt.Errorf("no BTF function for %s or its aliases %v", fn, aliases)
		}
		if btfName != fn {
			fmt.Printf("EBPFCHECK fentry target %s (the BTF name at %#x)\n", btfName, addr)
		}
	}

	counts, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: uint32(2 * len(kinds))})
	if err != nil {
		return fmt.Errorf("array map: %w", err)
	}
	defer counts.Close()
	read := func(slot int) uint64 {
		var v uint64
		if err := counts.Lookup(uint32(slot), &v); err != nil {
			panic(err)
		}
		return v
	}
	reset := func() {
		for i := 0; i < 2*len(kinds); i++ {
			counts.Put(uint32(i), uint64(0))
		}
	}

	if own {
		d := work()
		fmt.Printf("EBPFCHECK native ns/call %.1f\n", float64(d.Nanoseconds())/float64(n))
	}

	type attached struct {
		kind string
		prog *ebpf.Program
	}
	var progs []attached
	for i, kind := range kinds {
		prog, loadT, err := load(kind, btfName, counts, 2*i)
		if err != nil {
			if errors.Is(err, ebpf.ErrNotSupported) {
				fmt.Printf("EBPFCHECK probe %s unsupported: %v\n", kind, err)
				continue
			}
			return fmt.Errorf("%s: load: %w", kind, err)
		}
		defer prog.Close()
		t0 := time.Now()
		l, err := attach(kind, fn, off, prog)
		attachT := time.Since(t0)
		if kind == "kprobe-badoff" { // must be refused
			if err == nil {
				l.Close()
				failf("kprobe-badoff: a kprobe at %s+%d (inside an instruction) was accepted", fn, badOff)
			} else {
				fmt.Printf("EBPFCHECK probe %s refused at +%d: %v\n", kind, badOff, err)
			}
			continue
		}
		if err != nil {
			if errors.Is(err, ebpf.ErrNotSupported) {
				fmt.Printf("EBPFCHECK probe %s unsupported: %v\n", kind, err)
				continue
			}
			return fmt.Errorf("%s: attach: %w", kind, err)
		}
		reset()
		d := work()
		l.Close()
		all, mine := read(2*i), read(2*i+1)
		line := fmt.Sprintf("EBPFCHECK probe %s load %v attach %v hits %d own %d", kind, ms(loadT), ms(attachT), all, mine)
		if own {
			line += fmt.Sprintf(" ns/call %.1f", float64(d.Nanoseconds())/float64(n))
		}
		fmt.Println(line)
		check(kind, own, all, mine, want)
		progs = append(progs, attached{kind, prog})
	}

	if *allFlag && len(progs) > 1 {
		var links []link.Link
		for _, p := range progs {
			l, err := attach(p.kind, fn, off, p.prog)
			if err != nil {
				return fmt.Errorf("all: %s: %w", p.kind, err)
			}
			links = append(links, l)
		}
		reset()
		work()
		for _, l := range links {
			l.Close()
		}
		line := "EBPFCHECK all"
		for _, p := range progs {
			i := index(kinds, p.kind)
			all, mine := read(2*i), read(2*i+1)
			if own {
				line += fmt.Sprintf(" %s %d", p.kind, mine)
			} else {
				line += fmt.Sprintf(" %s %d", p.kind, all)
			}
			check("all "+p.kind, own, all, mine, want)
		}
		fmt.Println(line)
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d mismatches: %s", len(failed), strings.Join(failed, "; "))
	}
	fmt.Println("EBPFCHECK ok")
	return nil
}

var badOff = -1

func check(what string, own bool, all, mine uint64, want int) {
	got := all
	if own {
		got = mine
	}
	if got != uint64(want) {
		failf("%s: %d hits, want %d", what, got, want)
	}
}

func has(list []string, s string) bool { return index(list, s) >= 0 }

func index(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000) }

// workload returns a function that makes the calls and returns their time,
// and whether its calls are made by this process.
func workload(spec string, n int) (func() time.Duration, bool, error) {
	kind, arg, _ := strings.Cut(spec, ":")
	switch kind {
	case "getppid":
		return func() time.Duration {
			t0 := time.Now()
			for i := 0; i < n; i++ {
				syscall.RawSyscall(syscall.SYS_GETPPID, 0, 0, 0)
			}
			return time.Since(t0)
		}, true, nil
	case "read":
		buf := make([]byte, 4096)
		return func() time.Duration {
			t0 := time.Now()
			for i := 0; i < n; i++ {
				fd, err := unix.Open(arg, unix.O_RDONLY|unix.O_CLOEXEC, 0)
				if err != nil {
					panic(err)
				}
				unix.Read(fd, buf)
				unix.Close(fd)
			}
			return time.Since(t0)
		}, true, nil
	case "statfs":
		var st unix.Statfs_t
		return func() time.Duration {
			t0 := time.Now()
			for i := 0; i < n; i++ {
				if err := unix.Statfs(arg, &st); err != nil {
					panic(err)
				}
			}
			return time.Since(t0)
		}, true, nil
	case "sh":
		return func() time.Duration {
			t0 := time.Now()
			out, err := exec.Command("/bin/sh", "-c", arg).CombinedOutput()
			if err != nil {
				panic(fmt.Sprintf("sh -c %q: %v\n%s", arg, err, out))
			}
			return time.Since(t0)
		}, false, nil
	}
	return nil, false, fmt.Errorf("unknown workload %q", spec)
}

// kallsym finds fn's address in /proc/kallsyms, its module ("" for the
// core kernel) and the other function names at that address.
func kallsym(fn string) (addr uint64, mod string, aliases []string, err error) {
	b, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		return 0, "", nil, err
	}
	type sym struct {
		addr      uint64
		name, mod string
	}
	var syms []sym
	for _, l := range strings.Split(string(b), "\n") {
		fs := strings.Fields(l)
		if len(fs) < 3 || (fs[1] != "t" && fs[1] != "T") {
			continue
		}
		a, err := strconv.ParseUint(fs[0], 16, 64)
		if err != nil {
			continue
		}
		s := sym{addr: a, name: fs[2]}
		if len(fs) > 3 {
			s.mod = strings.Trim(fs[3], "[]")
		}
		syms = append(syms, s)
		if s.name == fn && addr == 0 {
			if a == 0 {
				return 0, "", nil, fmt.Errorf("kallsyms: %s at 0 (not root? kptr_restrict?)", fn)
			}
			addr, mod = a, s.mod
		}
	}
	if addr == 0 {
		return 0, "", nil, fmt.Errorf("kallsyms: no function %s", fn)
	}
	for _, s := range syms {
		if s.addr == addr && s.name != fn {
			aliases = append(aliases, s.name)
		}
	}
	return addr, mod, aliases, nil
}

// readKernel reads live kernel memory through /proc/kcore.
func readKernel(addr uint64, n int) ([]byte, error) {
	f, err := elf.Open("/proc/kcore")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr+uint64(n) <= p.Vaddr+p.Memsz {
			b := make([]byte, n)
			_, err := p.ReadAt(b, int64(addr-p.Vaddr))
			return b, err
		}
	}
	return nil, fmt.Errorf("/proc/kcore does not map %#x", addr)
}

func isFlow(in x86asm.Inst) bool {
	switch in.Op {
	case x86asm.CALL, x86asm.JMP, x86asm.RET, x86asm.LCALL, x86asm.LJMP, x86asm.LRET, x86asm.IRET,
		x86asm.IRETD, x86asm.IRETQ, x86asm.INT, x86asm.UD2, x86asm.LOOP, x86asm.LOOPE, x86asm.LOOPNE:
		return true
	}
	return strings.HasPrefix(in.Op.String(), "J") // Jcc, JRCXZ
}

// chooseOffset decodes the live text at addr and returns the start of the
// third instruction (the one after the ftrace nop and its successor), or of
// the first control transfer if that comes sooner: an instruction boundary
// every call passes through. bad is an offset inside a multi-byte
// instruction before it (for kprobe-badoff).
func chooseOffset(addr uint64) (off, bad int, err error) {
	code, err := readKernel(addr, 64)
	if err != nil {
		return 0, 0, err
	}
	off, bad = -1, -1
	pos := 0
	for i := 0; i < 8 && pos < len(code); i++ {
		in, err := x86asm.Decode(code[pos:], 64)
		if err != nil {
			return 0, 0, fmt.Errorf("decode %#x+%d: %w", addr, pos, err)
		}
		fmt.Printf("EBPFCHECK insn +%d %s %s\n", pos, hex.EncodeToString(code[pos:pos+in.Len]), x86asm.GNUSyntax(in, addr+uint64(pos), nil))
		if i >= 1 {
			off = pos
		}
		if i >= 1 && in.Len > 1 && bad < 0 {
			bad = pos + 1
		}
		if i == 2 || isFlow(in) {
			break
		}
		pos += in.Len
	}
	if off < 0 {
		return 0, 0, fmt.Errorf("no instruction boundary found after the entry of %#x", addr)
	}
	return off, bad, nil
}

// counter is a program that adds 1 to slot (every hit) and to slot+1 (hits
// in this process).
func counter(m *ebpf.Map, slot int) asm.Instructions {
	inc := func(s int, skip string) asm.Instructions {
		return asm.Instructions{
			asm.StoreImm(asm.RFP, -4, int64(s), asm.Word),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.LoadMapPtr(asm.R1, m.FD()),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, skip),
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		}
	}
	var p asm.Instructions
	p = append(p,
		asm.FnGetCurrentPidTgid.Call(),
		asm.RSh.Imm(asm.R0, 32),
		asm.Mov.Reg(asm.R7, asm.R0),
	)
	p = append(p, inc(slot, "own")...)
	p = append(p, asm.JNE.Imm(asm.R7, int32(os.Getpid()), "out").WithSymbol("own"))
	p = append(p, inc(slot+1, "out")...)
	p = append(p, asm.Mov.Imm(asm.R0, 0).WithSymbol("out"), asm.Return())
	return p
}

func load(kind, fn string, m *ebpf.Map, slot int) (*ebpf.Program, time.Duration, error) {
	spec := &ebpf.ProgramSpec{
		Name:         "gpcheck",
		Type:         ebpf.Kprobe,
		Instructions: counter(m, slot),
		License:      "GPL",
	}
	switch {
	case kind == "fentry" || kind == "fexit":
		spec.Type = ebpf.Tracing
		spec.AttachType = ebpf.AttachTraceFEntry
		if kind == "fexit" {
			spec.AttachType = ebpf.AttachTraceFExit
		}
		spec.AttachTo = fn
	case strings.HasPrefix(kind, "tracepoint:"):
		spec.Type = ebpf.TracePoint
	case kind == "kprobe-multi":
		spec.AttachType = ebpf.AttachTraceKprobeMulti
	case kind == "kprobe", kind == "kprobe-off", kind == "kretprobe", kind == "kprobe-badoff":
	default:
		return nil, 0, fmt.Errorf("unknown probe kind %q", kind)
	}
	t0 := time.Now()
	p, err := ebpf.NewProgram(spec)
	return p, time.Since(t0), err
}

func attach(kind, fn string, off int, p *ebpf.Program) (link.Link, error) {
	switch kind {
	case "kprobe":
		return link.Kprobe(fn, p, nil)
	case "kprobe-off":
		return link.Kprobe(fn, p, &link.KprobeOptions{Offset: uint64(off)})
	case "kprobe-badoff":
		if badOff < 0 {
			return nil, errors.New("no multi-byte instruction to split")
		}
		return link.Kprobe(fn, p, &link.KprobeOptions{Offset: uint64(badOff)})
	case "kretprobe":
		return link.Kretprobe(fn, p, nil)
	case "fentry":
		return link.AttachTracing(link.TracingOptions{Program: p, AttachType: ebpf.AttachTraceFEntry})
	case "fexit":
		return link.AttachTracing(link.TracingOptions{Program: p, AttachType: ebpf.AttachTraceFExit})
	case "kprobe-multi":
		return link.KprobeMulti(p, link.KprobeMultiOptions{Symbols: []string{fn}})
	}
	if tp, ok := strings.CutPrefix(kind, "tracepoint:"); ok {
		group, event, _ := strings.Cut(tp, "/")
		return link.Tracepoint(group, event, p, nil)
	}
	return nil, fmt.Errorf("unknown probe kind %q", kind)
}
