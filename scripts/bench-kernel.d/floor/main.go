//go:build linux

// Command floor is scripts/bench-kernel's floor: the least eBPF that does
// a benchmark probe's job, hand-written with cilium/ebpf's asm, attached to
// the benchmark's tracepoints while it runs a command.
//
//	floor [flags] -- COMMAND [ARGS...]
//
// The command is started under ptrace and held at its exec until the
// programs are in (as gprobes run --target kernel does), so that they can
// filter by its pid; then let go, untraced. When it has exited, floor
// detaches, drains the ring and prints one line:
//
//	floor PROG: hits H records R lost L
//
// H the hits the program counted (the counter map; for log, records +
// lost), R the records read from the ring, L the records the full ring
// refused (counted by the program).
//
// -prog:
//
//	count     syscalls:sys_enter_getppid (or -tp's): one atomic add to a
//	          one-entry array (what the issue calls the floor); with -pid
//	          the pid filter first (bpf_get_current_pid_tgid, shift,
//	          compare)
//	log       syscalls:sys_enter_getppid (or -tp's):
//	          bpf_get_current_pid_tgid, the pid filter (-pid), pid and tid
//	          stored as two 8-byte words (what gprobes' "push pid; push
//	          tid; log 2" logs), bpf_ringbuf_output of those 16 bytes;
//	          wakeup as gprobes does by default since 45d834c
//	          (bpf_ringbuf_query, a forced wakeup at the commit that
//	          brings 64 KiB, none otherwise: see -wakemode), the reader
//	          polling every 50 ms meanwhile
//	forkkill  signal:signal_generate and sched:sched_process_fork, the
//	          paper's fork/kill program as testdata/examples/
//	          fork_kill_tp.dpdf has it: the pid filter (-pid), one atomic
//	          add to counter 0 (kills) or 1 (forks), the 16 bytes of the
//	          signalled task's comm (four 4-byte loads from the record) or
//	          of the child's comm (bpf_probe_read_kernel at the __data_loc
//	          offset) to the ring, the same wakeup
//
// -steps, for finding what costs what in gprobes' programs (count and
// log): a comma-separated list of the pieces of gprobes' prologue and
// commit (bpf/compile.go, mainFunc and tails) to add before the count's
// atomic add, or before the log's output: pid (the filter), pidbtf (the
// filter as task->tgid through bpf_get_current_task_btf: not gprobes', a
// filter with another helper), switch (load the minor's switch byte and
// branch on it), disabled (load the probe's disabled word and branch on
// it), runs (atomic add to the runs counter), runsfetch
// (fetch-and-add of runs, compared with max hits: gprobes' code when the
// probe has a max hits), hitsfetch (fetch-and-add of hits, compared with
// the pass count: gprobes' code with a pass count), ts (bpf_ktime_get_ns,
// the clock offset loaded and added, stored: the record's time), cpu
// (bpf_get_smp_processor_id), pidtgid (one more bpf_get_current_pid_tgid),
// lookup (bpf_map_lookup_elem of a per-CPU array: gprobes' scratch
// value), query (bpf_ringbuf_query), probe16 (bpf_probe_read_kernel of 16
// bytes of the event record, the context's address taken as a number
// through a map value: gprobes' push field of an array and log mrf),
// rec64 (log only: 48 bytes of header stored before the 16 logged, a
// 64-byte record as gprobes' is). A step may come more than once.
//
// -wakemode level|edge|never, -wakeup BYTES: when a commit wakes the
// reader (log, forkkill): level forces a wakeup at every commit while
// BYTES or more wait (gprobes' policy before 45d834c), edge only at the
// commit that brings them to BYTES (gprobes' policy since, bpf/compile.go
// tails: the default), never at no commit (the reader
// polls every 50 ms; with -dpdf, gprobes' program with its threshold
// patched out of reach). -readsleep D: the reader sleeps D each
// time it finds the ring empty, as a reader that falls behind (descheduled,
// or slower than the records come).
//
// -dpdf FILE: instead, gprobes' own programs for FILE's tracepoint probes,
// compiled and loaded by package bpf as gprobes run --target kernel does
// (the pid filter with -pid, the maps, the ring and a reader draining it),
// so that -stats and -dump show them beside the floor's; prints "floor
// dpdf: hits H records R lost L" (H the probes' hits, skipped included).
//
// -stats: enable the kernel's BPF run-time statistics while the command
// runs and print each program's runs and ns per run (the program's own
// time, measured by the kernel around it: the tracepoint's own work is not
// in it, the statistics' two clock reads are).
//
// -dump: print the programs' instructions (before the verifier) and exit.
// -jited DIR: write each program's x86-64 code as the JIT made it, for
// objdump (bpftool here has no disassembler).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/rpn"
)

var (
	progFlag  = flag.String("prog", "count", "count, log or forkkill")
	pidFlag   = flag.Bool("pid", false, "filter by the command's pid")
	stepsFlag = flag.String("steps", "", "pieces of gprobes' prologue and commit to add (count, log; forkkill: ts alone makes sense): pid,pidbtf,disabled,runs,runsfetch,hitsfetch,ts,cpu,pidtgid,lookup,query")
	statsFlag = flag.Bool("stats", false, "print the programs' run counts and ns per run (BPF_ENABLE_STATS while the command runs)")
	dumpFlag  = flag.Bool("dump", false, "print the programs and exit")
	dpdfFlag  = flag.String("dpdf", "", "gprobes' programs for this DPDF's tracepoint probes instead of the floor's")
	wakeMode  = flag.String("wakemode", "edge", "level: force a wakeup at every commit while -wakeup bytes wait (gprobes' policy before 45d834c); edge: only at the commit that makes them reach -wakeup (gprobes' policy since); never: no commit wakes the reader, it polls (with -dpdf: gprobes' threshold put out of reach)")
	readSleep = flag.Duration("readsleep", 0, "the reader sleeps this long each time it finds the ring empty (a reader that falls behind)")
	tpFlag    = flag.String("tp", "syscalls:sys_enter_getppid", "the tracepoint of -prog count and log, `GROUP:EVENT`")
	jitedFlag = flag.String("jited", "", "write each program's machine code to `DIR`/NAME.bin, its address in NAME.addr (objdump -D -b binary -mi386:x86-64 --adjust-vma=ADDR)")
	ringFlag  = flag.Int("ring", 16<<20, "ring buffer size, bytes (gprobes' kernel target's default)")
	wakeFlag  = flag.Int("wakeup", 64<<10, "bytes of records waiting before a commit wakes the reader (0: the kernel's default, a wakeup whenever the reader waits)")
)

const (
	wakeAvail, noWakeup, forceWakeup = 0, 1, 2 // BPF_RB_AVAIL_DATA, BPF_RB_NO_WAKEUP, BPF_RB_FORCE_WAKEUP
	fpRec                            = -16     // the 16 bytes logged, on the stack
	fpHdr                            = -64     // 48 bytes before them: rec64's header
	fpKey                            = -72
)

// the maps
var counters, ring, scratch, lost *ebpf.Map

// fetchAdd: cilium/ebpf v0.22.0 drops BPF_FETCH when it marshals an atomic
// unless the immediate carries it (bpf/compile.go, fetchAdd).
func fetchAdd(dst, src asm.Register, off int16) asm.Instruction {
	in := asm.FetchAdd.Mem(dst, src, asm.DWord, off)
	in.Constant = int64(asm.FetchAdd >> 8)
	return in
}

func mapValue(dst asm.Register, m *ebpf.Map, off uint32) asm.Instruction {
	in := asm.LoadMapValue(dst, 0, off)
	if err := in.AssociateMap(m); err != nil {
		fail(err)
	}
	return in
}

func mapPtr(dst asm.Register, m *ebpf.Map) asm.Instruction {
	in := asm.LoadMapPtr(dst, 0)
	if err := in.AssociateMap(m); err != nil {
		fail(err)
	}
	return in
}

// pidFilter: r0 = bpf_get_current_pid_tgid; return unless its pid is pid.
// r0 stays the pid_tgid.
func pidFilter(pid uint32, done string) asm.Instructions {
	return asm.Instructions{
		asm.FnGetCurrentPidTgid.Call(),
		asm.Mov.Reg(asm.R1, asm.R0),
		asm.RSh.Imm(asm.R1, 32),
		asm.JNE.Imm(asm.R1, int32(pid), done),
	}
}

// commit: bpf_ringbuf_output of the 16 bytes at fp-16 (size 16) or of the
// 64 at fp-64 (size 64), with the wakeup policy; a refusal counted in lost.
func commit(size int32) asm.Instructions {
	var in asm.Instructions
	switch {
	case *wakeFlag > 0 && *wakeMode == "level":
		in = append(in,
			mapPtr(asm.R1, ring),
			asm.Mov.Imm(asm.R2, wakeAvail),
			asm.FnRingbufQuery.Call(),
			asm.Mov.Imm(asm.R4, noWakeup),
			asm.JLT.Imm(asm.R0, int32(*wakeFlag), "few"),
			asm.Mov.Imm(asm.R4, forceWakeup),
			asm.Mov.Reg(asm.R4, asm.R4).WithSymbol("few"),
		)
	case *wakeFlag > 0 && *wakeMode == "edge":
		// the bytes waiting before this record: below the mark, and
		// at it or above with the record (8 bytes of ring header)
		in = append(in,
			mapPtr(asm.R1, ring),
			asm.Mov.Imm(asm.R2, wakeAvail),
			asm.FnRingbufQuery.Call(),
			asm.Mov.Imm(asm.R4, noWakeup),
			asm.JGE.Imm(asm.R0, int32(*wakeFlag), "few"),
			asm.JLT.Imm(asm.R0, int32(*wakeFlag)-size-8, "few"),
			asm.Mov.Imm(asm.R4, forceWakeup),
			asm.Mov.Reg(asm.R4, asm.R4).WithSymbol("few"),
		)
	case *wakeMode == "never":
		in = append(in, asm.Mov.Imm(asm.R4, noWakeup))
	case *wakeFlag > 0:
		fail(fmt.Errorf("-wakemode %q: level, edge or never", *wakeMode))
	default:
		in = append(in, asm.Mov.Imm(asm.R4, 0))
	}
	off := int32(fpRec)
	if size == 64 {
		off = fpHdr
	}
	in = append(in,
		mapPtr(asm.R1, ring),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, off),
		asm.Mov.Imm(asm.R3, size),
		asm.FnRingbufOutput.Call(),
		asm.JEq.Imm(asm.R0, 0, "done"),
		mapValue(asm.R1, lost, 0),
		asm.Mov.Imm(asm.R2, 1),
		asm.AddAtomic.Mem(asm.R1, asm.R2, asm.DWord, 0),
	)
	return in
}

func ret() asm.Instructions {
	return asm.Instructions{asm.Mov.Imm(asm.R0, 0).WithSymbol("done"), asm.Return()}
}

// step is one piece of gprobes' prologue or commit (-steps), emitted as
// gprobes emits it; values are stored in the 48 bytes of header below
// the record (fpHdr).
func step(pid uint32, s string) asm.Instructions {
	var in asm.Instructions
	switch s {
	case "pid":
		in = append(in, pidFilter(pid, "done")...)
	case "pidbtf": // the filter without a helper call's return:
		// bpf_get_current_task_btf (inlined by the verifier where
		// the kernel does) and task->tgid loaded through BTF
		in = append(in,
			asm.FnGetCurrentTaskBtf.Call(),
			asm.LoadMem(asm.R1, asm.R0, tgidOffset(), asm.Word),
			asm.JNE.Imm(asm.R1, int32(pid), "done"),
		)
	case "switch": // the minor's switch byte (bpf/switch.go switchCheck)
		in = append(in,
			mapValue(asm.R1, counters, 48),
			asm.LoadMem(asm.R2, asm.R1, 0, asm.Byte),
			asm.JNE.Imm(asm.R2, 0, "done"),
		)
	case "disabled": // counters word 8: disabled
		in = append(in,
			mapValue(asm.R1, counters, 0),
			asm.LoadMem(asm.R2, asm.R1, 8, asm.DWord),
			asm.JNE.Imm(asm.R2, 0, "done"),
		)
	case "runs": // counters word 16: runs
		in = append(in,
			mapValue(asm.R1, counters, 0),
			asm.Mov.Imm(asm.R0, 1),
			asm.AddAtomic.Mem(asm.R1, asm.R0, asm.DWord, 16),
		)
	case "runsfetch": // max hits 1000000000
		in = append(in,
			mapValue(asm.R1, counters, 0),
			asm.Mov.Imm(asm.R0, 1),
			fetchAdd(asm.R1, asm.R0, 16),
			asm.Add.Imm(asm.R0, 1),
			asm.Mov.Imm(asm.R2, 1000000000),
			asm.JGT.Reg(asm.R0, asm.R2, "done"),
		)
	case "hitsfetch": // pass count 1
		in = append(in,
			mapValue(asm.R1, counters, 0),
			asm.Mov.Imm(asm.R0, 1),
			fetchAdd(asm.R1, asm.R0, 24),
			asm.Add.Imm(asm.R0, 1),
			asm.Mov.Imm(asm.R2, 0),
			asm.JLE.Reg(asm.R0, asm.R2, "done"),
		)
	case "ts":
		in = append(in,
			asm.FnKtimeGetNs.Call(),
			mapValue(asm.R1, counters, 32),
			asm.LoadMem(asm.R1, asm.R1, 0, asm.DWord),
			asm.Add.Reg(asm.R0, asm.R1),
			asm.StoreMem(asm.R10, fpHdr+24, asm.R0, asm.DWord),
		)
	case "cpu":
		in = append(in, asm.FnGetSmpProcessorId.Call(), asm.StoreMem(asm.R10, fpHdr+8, asm.R0, asm.Word))
	case "pidtgid":
		in = append(in, asm.FnGetCurrentPidTgid.Call(), asm.StoreMem(asm.R10, fpHdr+16, asm.R0, asm.DWord))
	case "lookup":
		in = append(in,
			asm.StoreImm(asm.R10, fpKey, 0, asm.Word),
			mapPtr(asm.R1, scratch),
			asm.Mov.Reg(asm.R2, asm.R10),
			asm.Add.Imm(asm.R2, fpKey),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "done"),
			asm.Mov.Reg(asm.R6, asm.R0),
			asm.StoreImm(asm.R6, 0, 0, asm.Word),
		)
	case "query":
		in = append(in, mapPtr(asm.R1, ring), asm.Mov.Imm(asm.R2, wakeAvail), asm.FnRingbufQuery.Call())
	case "probe16": // log mrf of 16 bytes of the event record, as gprobes
		// does it: the record's address through the scratch value (a
		// number), bpf_probe_read_kernel into the log
		in = append(in,
			mapValue(asm.R1, counters, 40),
			asm.StoreMem(asm.R1, 0, asm.R9, asm.DWord),
			asm.LoadMem(asm.R3, asm.R1, 0, asm.DWord),
			asm.Add.Imm(asm.R3, 8),
			asm.Mov.Reg(asm.R1, asm.R10),
			asm.Add.Imm(asm.R1, fpHdr),
			asm.Mov.Imm(asm.R2, 16),
			asm.FnProbeReadKernel.Call(),
		)
	case "rec64": // gprobes' 48-byte header: the record is 64 bytes
		for off := int16(fpHdr); off < fpRec; off += 8 {
			// BPF_ST BPF_DW, which asm.StoreImm does not make
			in = append(in, asm.Instruction{OpCode: asm.StoreImmOp(asm.DWord), Dst: asm.R10, Offset: off})
		}
	default:
		fail(fmt.Errorf("-steps: unknown step %q", s))
	}
	return in
}

// countProg: the count, after the steps asked for.
func countProg(pid uint32, steps []string) asm.Instructions {
	var in asm.Instructions
	if *pidFlag {
		steps = append([]string{"pid"}, steps...)
	}
	in = append(in, asm.Mov.Reg(asm.R9, asm.R1)) // the context, as gprobes keeps it
	for _, s := range steps {
		if s == "rec64" {
			fail(errors.New("-steps rec64 goes with -prog log"))
		}
		in = append(in, step(pid, s)...)
	}
	in = append(in,
		mapValue(asm.R1, counters, 0),
		asm.Mov.Imm(asm.R2, 1),
		asm.AddAtomic.Mem(asm.R1, asm.R2, asm.DWord, 0),
	)
	return append(in, ret()...)
}

// neverWake puts gprobes' wakeup threshold out of reach in a compiled
// program (-dpdf -wakemode never): the compare of bpf_ringbuf_query's
// answer with bpf.DefaultWakeup that picks BPF_RB_FORCE_WAKEUP gets an
// immediate no ring reaches, so that every commit is BPF_RB_NO_WAKEUP and
// the reader only polls.
func neverWake(ins asm.Instructions) {
	n := 0
	for i := 1; i < len(ins); i++ {
		if ins[i-1].IsBuiltinCall() && ins[i-1].Constant == int64(asm.FnRingbufQuery) {
			for j := i; j < len(ins) && j < i+3; j++ {
				if ins[j].OpCode.JumpOp() == asm.JLT && ins[j].Constant == bpf.DefaultWakeup {
					ins[j].Constant = 1<<31 - 1
					n++
				}
			}
		}
	}
	if n == 0 {
		fail(errors.New("-wakemode never: no wakeup threshold found in gprobes' program"))
	}
}

// writeJited writes p's machine code and its address to dir.
func writeJited(dir, name string, p *ebpf.Program) {
	info, err := p.Info()
	if err != nil {
		fail(err)
	}
	code, ok := info.JitedInsns()
	addrs, ok2 := info.JitedKsymAddrs()
	if !ok || !ok2 || len(addrs) == 0 {
		fail(errors.New("no JIT code (bpf_jit_enable?)"))
	}
	if err := os.WriteFile(dir+"/"+name+".bin", code, 0o644); err != nil {
		fail(err)
	}
	if err := os.WriteFile(dir+"/"+name+".addr", fmt.Appendf(nil, "%#x\n", addrs[0]), 0o644); err != nil {
		fail(err)
	}
}

// tgidOffset is task_struct's tgid's offset, from the kernel's BTF.
func tgidOffset() int16 {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		fail(err)
	}
	var ts *btf.Struct
	if err := spec.TypeByName("task_struct", &ts); err != nil {
		fail(err)
	}
	for _, m := range ts.Members {
		if m.Name == "tgid" {
			return int16(m.Offset.Bytes())
		}
	}
	fail(errors.New("task_struct has no tgid"))
	return 0
}

// logProg: pid and tid, 16 bytes, to the ring, after the steps asked
// for (rec64: with 48 bytes of header before them).
func logProg(pid uint32, steps []string) asm.Instructions {
	var in asm.Instructions
	in = append(in, asm.Mov.Reg(asm.R9, asm.R1))
	if *pidFlag {
		in = append(in, pidFilter(pid, "done")...)
	} else {
		in = append(in, asm.FnGetCurrentPidTgid.Call())
	}
	in = append(in,
		asm.Mov.Reg(asm.R1, asm.R0),
		asm.RSh.Imm(asm.R1, 32),
		asm.StoreMem(asm.R10, fpRec, asm.R1, asm.DWord), // pid
		asm.Mov.Reg32(asm.R1, asm.R0),
		asm.StoreMem(asm.R10, fpRec+8, asm.R1, asm.DWord), // tid
	)
	size := int32(16)
	for _, s := range steps {
		if s == "rec64" { // first: the others store into the header
			size = 64
			in = append(in, step(pid, s)...)
		}
	}
	for _, s := range steps {
		if s != "rec64" && s != "pid" { // the filter is -pid's here
			in = append(in, step(pid, s)...)
		}
	}
	in = append(in, commit(size)...)
	return append(in, ret()...)
}

// forkKillProg: count k, 16 bytes of a comm to the ring. signal_generate's
// comm is a char[16] at offset 20 of the record, sched_process_fork's
// child_comm a __data_loc at offset 16.
func forkKillProg(pid uint32, k int, steps []string) asm.Instructions {
	var in asm.Instructions
	in = append(in, asm.Mov.Reg(asm.R6, asm.R1))
	if *pidFlag {
		in = append(in, pidFilter(pid, "done")...)
	}
	in = append(in,
		mapValue(asm.R1, counters, uint32(8*k)),
		asm.Mov.Imm(asm.R2, 1),
		asm.AddAtomic.Mem(asm.R1, asm.R2, asm.DWord, 0),
	)
	if k == 0 {
		for i := int16(0); i < 4; i++ {
			in = append(in,
				asm.LoadMem(asm.R1, asm.R6, 20+4*i, asm.Word),
				asm.StoreMem(asm.R10, fpRec+4*i, asm.R1, asm.Word),
			)
		}
	} else {
		// the record's address as a number (through a map value: the
		// verifier allows no arithmetic on the context pointer), plus
		// the __data_loc's offset
		in = append(in,
			mapValue(asm.R1, counters, 40),
			asm.StoreMem(asm.R1, 0, asm.R6, asm.DWord),
			asm.LoadMem(asm.R2, asm.R1, 0, asm.DWord),
			asm.LoadMem(asm.R3, asm.R6, 16, asm.Word),
			asm.And.Imm(asm.R3, 0xffff),
			asm.Add.Reg(asm.R3, asm.R2),
			asm.Mov.Reg(asm.R1, asm.R10),
			asm.Add.Imm(asm.R1, fpRec),
			asm.Mov.Imm(asm.R2, 16),
			asm.FnProbeReadKernel.Call(),
		)
	}
	for _, s := range steps { // -steps ts: the record's time, as gprobes takes it
		if s != "pid" {
			in = append(in, step(pid, s)...)
		}
	}
	in = append(in, commit(16)...)
	return append(in, ret()...)
}

type attachment struct {
	group, event string
	name         string
	ins          asm.Instructions
	prog         *ebpf.Program // gprobes' (-dpdf), loaded
}

// gprobesProgs compiles and loads the tracepoint probes of a DPDF with
// package bpf, as the kernel target does (kernel/place_linux.go, attach).
func gprobesProgs(path string, pid uint32) ([]attachment, *bpf.Maps) {
	f, err := dpdf.Parse(path, dpdf.Options{})
	if err != nil {
		fail(err)
	}
	p, err := compiler.CompileProgram(f, rpn.CompileOptions{})
	if err != nil {
		fail(err)
	}
	m := p.Module()
	maps, err := bpf.NewMaps(m, bpf.MapOptions{RingSize: *ringFlag})
	if err != nil {
		fail(err)
	}
	if err := maps.SetClock(); err != nil {
		fail(err)
	}
	var atts []attachment
	for pi := range m.Probes {
		pr := &m.Probes[pi]
		if pr.Kind != rpn.ProbeTracepoint {
			fail(fmt.Errorf("%s: probe %d is not a tracepoint", path, pi))
		}
		group, event, _ := strings.Cut(pr.Loc.Text, ":")
		o := bpf.Options{Maps: maps, Probe: uint32(pi), Kind: bpf.KindTracepoint, PID: pid}
		if len(m.Fields) > 0 {
			if o.Format, err = bpf.ReadFormat(group, event); err != nil {
				fail(err)
			}
		}
		c, err := bpf.CompileProbe(p, pi, o)
		if err != nil {
			fail(err)
		}
		if *wakeMode == "never" {
			neverWake(c.Spec.Instructions)
		}
		a := attachment{group: group, event: event, name: fmt.Sprintf("gp_%d", pi), ins: c.Spec.Instructions}
		if !*dumpFlag {
			if a.prog, err = c.Load(); err != nil {
				fail(err)
			}
		}
		atts = append(atts, a)
	}
	return atts, maps
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "floor:", err)
	os.Exit(1)
}

func newMaps() {
	mk := func(s *ebpf.MapSpec) *ebpf.Map {
		m, err2 := ebpf.NewMap(s)
		if err2 != nil {
			fail(err2)
		}
		return m
	}
	counters = mk(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 64, MaxEntries: 1})
	lost = mk(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	scratch = mk(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 1024, MaxEntries: 1})
	ring = mk(&ebpf.MapSpec{Type: ebpf.RingBuf, MaxEntries: uint32(*ringFlag)})
}

func word(m *ebpf.Map, off int) uint64 {
	var v []byte
	if err := m.Lookup(uint32(0), &v); err != nil {
		fail(err)
	}
	var x uint64
	for i := 7; i >= 0; i-- {
		x = x<<8 | uint64(v[off+i])
	}
	return x
}

func main() {
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: floor [flags] -- COMMAND [ARGS...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	argv := flag.Args()
	if len(argv) == 0 && !*dumpFlag {
		flag.Usage()
		os.Exit(2)
	}
	var steps []string
	if *stepsFlag != "" {
		steps = strings.Split(*stepsFlag, ",")
		if *progFlag != "count" && *progFlag != "log" && (*progFlag != "forkkill" || *stepsFlag != "ts") {
			fail(errors.New("-steps goes with -prog count or log (forkkill: -steps ts only)"))
		}
	}
	tpGroup, tpEvent, ok := strings.Cut(*tpFlag, ":")
	if !ok {
		fail(fmt.Errorf("-tp %q: GROUP:EVENT", *tpFlag))
	}
	newMaps()

	// the command, held at its exec
	var cmd *exec.Cmd
	pid := uint32(0)
	if !*dumpFlag {
		path, err := exec.LookPath(argv[0])
		if err != nil {
			fail(err)
		}
		runtime.LockOSThread()
		cmd = exec.Command(path, argv[1:]...)
		cmd.Args[0] = argv[0]
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
		if err := cmd.Start(); err != nil {
			fail(err)
		}
		pid = uint32(cmd.Process.Pid)
		var ws unix.WaitStatus
		if _, err := unix.Wait4(int(pid), &ws, 0, nil); err != nil || !ws.Stopped() {
			cmd.Process.Kill()
			fail(fmt.Errorf("%s did not stop at its exec (%v)", argv[0], err))
		}
	}

	var atts []attachment
	var gmaps *bpf.Maps
	switch {
	case *dpdfFlag != "":
		filter := uint32(0)
		if *pidFlag {
			filter = pid
		}
		atts, gmaps = gprobesProgs(*dpdfFlag, filter)
		ring = gmaps.Ring
	case *progFlag == "count":
		atts = []attachment{{tpGroup, tpEvent, "floor_count", countProg(pid, steps), nil}}
	case *progFlag == "log":
		atts = []attachment{{tpGroup, tpEvent, "floor_log", logProg(pid, steps), nil}}
	case *progFlag == "forkkill":
		atts = []attachment{
			{"signal", "signal_generate", "floor_kill", forkKillProg(pid, 0, steps), nil},
			{"sched", "sched_process_fork", "floor_fork", forkKillProg(pid, 1, steps), nil},
		}
	default:
		fail(fmt.Errorf("-prog %q: count, log or forkkill", *progFlag))
	}
	if *dumpFlag {
		for _, a := range atts {
			fmt.Printf("%s:%s\n%v\n", a.group, a.event, a.ins)
		}
		return
	}
	var progs []*ebpf.Program
	var links []link.Link
	for _, a := range atts {
		p := a.prog
		if p == nil {
			var err error
			p, err = ebpf.NewProgram(&ebpf.ProgramSpec{Name: a.name, Type: ebpf.TracePoint, License: "GPL", Instructions: a.ins})
			if err != nil {
				cmd.Process.Kill()
				fail(fmt.Errorf("%s: %w", a.name, err))
			}
		}
		l, err := link.Tracepoint(a.group, a.event, p, nil)
		if err != nil {
			cmd.Process.Kill()
			fail(fmt.Errorf("%s:%s: %w", a.group, a.event, err))
		}
		progs = append(progs, p)
		links = append(links, l)
		if *jitedFlag != "" {
			writeJited(*jitedFlag, a.name, p)
		}
	}
	var stats interface{ Close() error }
	if *statsFlag {
		var err error
		if stats, err = ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME)); err != nil {
			fail(fmt.Errorf("BPF_ENABLE_STATS: %w", err))
		}
	}

	// the reader drains the ring meanwhile, polling (the programs wake it
	// only once 64 KiB wait)
	records := 0
	rd, err := ringbuf.NewReader(ring)
	if err != nil {
		fail(err)
	}
	stop := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		var rec ringbuf.Record
		stopping := false
		for {
			select {
			case <-stop:
				stopping = true
			default:
			}
			dl := time.Now().Add(50 * time.Millisecond)
			if *readSleep > 0 && !stopping && rd.AvailableBytes() == 0 {
				time.Sleep(*readSleep) // off the CPU, as a reader descheduled
				continue
			}
			if stopping || rd.AvailableBytes() > 0 {
				dl = time.Now()
			}
			rd.SetDeadline(dl)
			err := rd.ReadInto(&rec)
			if err == nil {
				records++
				continue
			}
			if errors.Is(err, os.ErrDeadlineExceeded) && !stopping {
				continue
			}
			return
		}
	}()

	if err := unix.PtraceDetach(int(pid)); err != nil {
		cmd.Process.Kill()
		fail(err)
	}
	runtime.UnlockOSThread()
	cmd.Wait()
	for _, l := range links {
		l.Close()
	}
	if stats != nil {
		for i, p := range progs {
			st, err := p.Stats()
			if err == nil && st.RunCount > 0 {
				fmt.Printf("floor %s: %d runs, %.1f ns per run (BPF stats), %d recursion misses\n", atts[i].name, st.RunCount, float64(st.Runtime.Nanoseconds())/float64(st.RunCount), st.RecursionMisses)
			}
		}
		stats.Close()
	}
	close(stop)
	<-readerDone
	rd.Close()
	nlost := word(lost, 0)
	var hits uint64
	prog := *progFlag
	if gmaps != nil {
		prog, nlost = "dpdf", 0
		for pi := range atts {
			c, err := gmaps.ProbeCounters(pi)
			if err != nil {
				fail(err)
			}
			hits += c.Hits
			nlost += c.Lost
		}
	}
	switch prog {
	case "count":
		hits = word(counters, 0)
	case "log":
		hits = uint64(records) + nlost
	case "forkkill":
		hits = word(counters, 0) + word(counters, 8)
		fmt.Printf("floor forkkill: kills %d forks %d\n", word(counters, 0), word(counters, 8))
	}
	fmt.Printf("floor %s: hits %d records %d lost %d\n", prog, hits, records, nlost)
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.ExitStatus() != 0 {
		os.Exit(ws.ExitStatus())
	}
}
