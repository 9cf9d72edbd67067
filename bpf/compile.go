package bpf

import (
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/usdt"
)

// Kind is where a compiled program attaches, which fixes its eBPF program
// type and what its context holds.
type Kind uint8

const (
	// KindTracepoint: BPF_PROG_TYPE_TRACEPOINT (AttachTracepoint); the
	// context is the event's record (push field reads it, given
	// Options.Format), there are no registers.
	KindTracepoint Kind = iota
	// KindRawTracepoint: BPF_PROG_TYPE_RAW_TRACEPOINT; the context is the
	// tracepoint's arguments, there are no registers.
	KindRawTracepoint
	// KindKprobe: BPF_PROG_TYPE_KPROBE at a kernel address; the context is
	// the kernel's pt_regs at the probe (regs->ip is the probe address + 1,
	// as after an int3).
	KindKprobe
	// KindUprobe: BPF_PROG_TYPE_KPROBE on a uprobe; the context is the
	// user pt_regs at the probe, memory is the process's.
	KindUprobe
	// KindFentry: BPF_PROG_TYPE_TRACING, BPF_TRACE_FENTRY, at the entry of
	// the kernel function Options.AttachTo (AttachFentry); the context is the
	// function's arguments, one u64 each: push r reads the argument
	// registers rdi, rsi, rdx, rcx, r8, r9 below Options.NumArgs, and rip
	// is Options.Addr. Any other register is refused with an Unsupported
	// wrapping ErrNeedsKprobe: a kprobe at the same address can.
	KindFentry
	// KindKretprobe: BPF_PROG_TYPE_KPROBE on a kretprobe
	// (AttachKretprobe); the context is the kernel's pt_regs as the
	// function returns: rax is its return value, rsp the caller's stack
	// pointer past the return address, rip the return address (the
	// caller's next instruction), the callee-saved registers the
	// caller's; the argument registers hold whatever the function left.
	KindKretprobe
	// KindWatch: BPF_PROG_TYPE_PERF_EVENT on a hardware breakpoint perf
	// event per CPU (AttachWatch): the context's pt_regs are the task's
	// right after the instruction that accessed the watched bytes (rip the
	// next instruction's address).
	KindWatch
)

func (k Kind) String() string {
	switch k {
	case KindTracepoint:
		return "tracepoint"
	case KindRawTracepoint:
		return "raw tracepoint"
	case KindKprobe:
		return "kprobe"
	case KindUprobe:
		return "uprobe"
	case KindFentry:
		return "fentry"
	case KindKretprobe:
		return "kretprobe"
	case KindWatch:
		return "watch"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

func (k Kind) progType() ebpf.ProgramType {
	switch k {
	case KindRawTracepoint:
		return ebpf.RawTracepoint
	case KindKprobe, KindUprobe, KindKretprobe:
		return ebpf.Kprobe
	case KindFentry:
		return ebpf.Tracing
	case KindWatch:
		return ebpf.PerfEvent
	}
	return ebpf.TracePoint
}

// Names by which a program refers to the maps when Options.Maps does not
// give them (asm references, for a CollectionSpec to resolve).
const (
	MapScratch  = "gprobes_scratch"
	MapRing     = "gprobes_ring"
	MapCounters = "gprobes_counters"
	MapLV       = "gprobes_lv"
	MapGV       = "gprobes_gv"
	// MapSwitch (switch.go)
)

// Options are what Compile needs besides the program.
type Options struct {
	// Maps the program uses; nil (or a nil field): the program refers to
	// the map by its name (MapScratch ...).
	Maps *Maps
	// Probe is the probe's slot in its module's maps (counters, scratch),
	// below the module's number of probes, and the probe id in its
	// records; usually the probe's index.
	Probe uint32
	Kind  Kind
	// PID and TID, when not zero, restrict the probe to one process or
	// thread (ids in the root PID namespace): the program returns at once
	// for others, which are not hits of the probe at all.
	PID, TID uint32
	// Follow, when set, restricts the probe to the processes in this map
	// (Follow.Map: a process and those it starts), in place of PID.
	Follow *ebpf.Map
	// Name of the eBPF program (at most 15 characters); "gp_PROBE" if empty.
	Name string
	// Wakeup is how many bytes of records wait in the ring buffer before a
	// commit wakes the reader (BPF_RB_FORCE_WAKEUP; below it,
	// BPF_RB_NO_WAKEUP, and the reader polls: Reader.Poll). A wakeup per
	// record costs about a microsecond a hit. 0 means DefaultWakeup; a
	// negative value wakes the reader at every record it is waiting for
	// (the kernel's default).
	Wakeup int
	// Loop compiles the program in loop mode (doc.go) even when it has no
	// cycle and no call. Compiled.Load does it by itself when the
	// verifier finds the straight program too complex.
	Loop bool

	// Format is a tracepoint probe's event format (ReadFormat): push
	// field,NAME finds NAME (Module.Fields[i], i its operand) there. A
	// name the event lacks is an Unsupported at the instruction, its
	// message listing the event's fields; push field in a probe of another
	// kind, or without a Format, is Unsupported too.
	Format *Format

	// AttachTo is a fentry probe's kernel function (its name in the
	// kernel's BTF, vmlinux's or a loaded module's): the program is
	// loaded for it (ProgramSpec.AttachTo).
	AttachTo string
	// NumArgs is a fentry probe's function's argument count in registers
	// (FuncArgs): push r of rdi, rsi, rdx, rcx, r8, r9 reads argument 0
	// to 5 when it is below NumArgs.
	NumArgs int
	// Addr is a fentry probe's function's address: what push r,rip
	// reads there (without it push r,rip is refused, ErrNeedsKprobe).
	Addr uint64

	// Args are a usdt probe's arguments as its note describes them
	// (USDTArg): push arg,N reads Args[N-1]. KindUprobe only.
	Args []USDTArg

	// Biased are the push d, immediates (by their byte offset in
	// Module.Code, rpn.Reloc.Off) that hold link-time addresses of a
	// module loaded at another address in each process (a shared
	// library, a PIE): the program adds the process's load bias times the
	// value (the sum's bias factor, rpn.Sum.BiasFactor), the bias being
	// the probed address the hit shows (regs->ip) minus Addr, the probe's
	// link-time address. KindUprobe only: a uprobe's ip is the probed
	// address.
	Biased map[uint32]uint64

	// IV, when set, is the probe's part in its function's instance
	// variables (iv.go); without it push iv and pop iv use 8 words of
	// zero of the hit's own.
	IV *IVOptions

	// tpBTF, set by tests only (export_linux_test.go), makes a KindFentry
	// program a BTF raw tracepoint (BPF_TRACE_RAW_TP) on this tracepoint:
	// the same program type and context (u64 arguments), which a kernel
	// refusing fentry may still load and attach.
	tpBTF string
}

// DefaultWakeup is Options.Wakeup's default: 64 KiB of records.
const DefaultWakeup = 64 << 10

// Compiled is one probe compiled to eBPF, with what is needed to map the
// verifier's complaints back to the RPN program.
type Compiled struct {
	Spec *ebpf.ProgramSpec
	// Loop is true when the program runs in loop mode (bpf_loop; doc.go).
	Loop bool
	// Regions is how many functions the blocks of loop mode are in
	// (regionStarts); 0 in straight mode.
	Regions int
	p       *rpn.Program
	pi      int
	o       Options
	rpn     []int // raw eBPF offset -> RPN instruction index (absolute), -1 for glue
	est     int   // Estimate
	overAt  int   // the raw instruction where est goes past maxProcessed, -1
}

// Compile compiles probe pi of p to an eBPF program. It returns an
// *Unsupported error for a program eBPF cannot run with the machine's
// semantics.
func Compile(p *rpn.Program, pi int, o Options) (*ebpf.ProgramSpec, error) {
	c, err := CompileProbe(p, pi, o)
	if err != nil {
		return nil, err
	}
	return c.Spec, nil
}

// Registers. r1-r5 are arguments and temporaries (a helper call clobbers
// them and r0); r6-r9 survive calls.
const (
	rScratch = asm.R6 // the CPU's scratch value
	rTOS     = asm.R7 // the TOS index 0..31 (dynamic stack)
	rLogN    = asm.R8 // the log length 0..logmax
	rJumps   = asm.R9 // jumps left (straight mode, when counted); ctx in the prologue
)

// Slots of the eBPF stack (r10 - N), in each function's own frame.
const (
	fpKey  = -8  // u32 key of the scratch lookup
	fpAddr = -16 // an address kept across a helper call
	fpN    = -24 // a length kept across a helper call
	fpCut  = -32 // log str: the length was cut to the room left
	fpByte = -40 // one byte read
)

type compiler struct {
	p      *rpn.Program
	lw     *rpn.Lowering // the probe's analysis, made once by rpn.Load
	mod    *rpn.Module
	pr     *rpn.Probe
	pi     int
	o      Options
	a      assembler
	first  int
	n      int
	is32   bool
	w      int
	logmax int32
	user   bool // memory is a process's (uprobe, user module)
	names  map[uint32]string

	// analysis
	hasCalls, cyclic, loopMode bool
	countJumps                 bool // straight mode: the jump budget is checked at run time
	needScratch, usesTS        bool
	usesIV                     bool           // push iv or pop iv
	logMoves                   bool           // an instruction changes the log's length
	ctxLog                     map[int]*Field // log mrf of a constant length of a tracepoint's array field: copied from the context (ctxlog.go)
	usesIDs                    bool           // push pid or push tid: bpf_get_current_pid_tgid once, in the header
	stackN                     [2]int         // the most frames log kstack (0) and log ustack (1) log: bpf_get_stack once each, in the prologue
	regs                       []rpn.Reg      // ctx registers push r reads, canonical
	fields                     []*Field       // tracepoint fields push field reads, copied at the hit
	fieldAt                    map[uint16]int // push field's operand -> index in fields
	static                     bool
	reach                      []bool
	depth                      []int
	needZero                   uint32
	d                          int

	forceLoop   bool    // compile in loop mode (too many branches straight)
	regionFirst []int   // loop mode: the first instruction of each region function
	regionAt    []int   // loop mode: the first eBPF instruction of each region function
	loops       int     // bpf_loop's bound (loopBudget)
	tailsLen    int     // eBPF instructions of the main function's tails
	labels      []label // per RPN instruction
	fill        []bool  // the instruction starts with the registers loaded from the scratch value (joins)
	lastIsland  int     // where the last island is (maybeIsland)
	blockID     map[int]int
	blocks      []int // block id -> instruction
	stubs       []func()
	exStubs     map[[2]int]label
	lCommit     label // main: r8 the log length; header filled but for the hit's identity
	lExcept     label // main: the header holds the exception
	lDone       label // return 0
	lEnd        label // the program has run (exit 0, abort, after a commit): an entry probe saves its instance; else lDone
	lSkip       label // count skipped, return 0
	inCB        bool  // emitting loop mode's blocks (a region function)
	used        map[label]bool
	live        []bool // reachable from the entry: the kernel refuses unreachable code
	mapRefErr   error
}

// CompileProbe is Compile returning the mapping the verifier's errors need
// (Compiled.Load).
func CompileProbe(p *rpn.Program, pi int, o Options) (*Compiled, error) {
	if pi < 0 || pi >= p.NumProbes() {
		return nil, fmt.Errorf("bpf: no probe %d (the program has %d)", pi, p.NumProbes())
	}
	if int(o.Probe) >= p.NumProbes() {
		return nil, fmt.Errorf("bpf: slot %d for a probe of a module of %d probes", o.Probe, p.NumProbes())
	}
	if o.Kind == KindFentry && o.AttachTo == "" && o.tpBTF == "" {
		return nil, fmt.Errorf("bpf: a fentry probe needs its function (Options.AttachTo)")
	}
	c, err := newCompiler(p, pi, o, false, nil)
	if err != nil {
		return nil, err
	}
	if !c.loopMode && c.branches(0) > maxBranches {
		// more branches than the verifier can keep pending on one path
		if c, err = newCompiler(p, pi, o, true, nil); err != nil {
			return nil, err
		}
	}
	if c.loopMode {
		rs, err := c.regionStarts()
		if err != nil {
			return nil, err
		}
		if len(rs) > 1 {
			if c, err = newCompiler(p, pi, o, true, rs); err != nil {
				return nil, err
			}
		}
	}
	// the verifier walks the main function's tails once for each jump
	// into them at most (straight mode: exits and exceptions; the states
	// differ in the log length)
	tailPaths := 0
	for _, j := range c.a.jumps {
		switch j.l {
		case c.lCommit, c.lExcept, c.lEnd, c.lDone, c.lSkip:
			tailPaths++
		}
	}
	if err := c.a.finish(); err != nil {
		return nil, err
	}
	name := o.Name
	if name == "" {
		name = fmt.Sprintf("gp_%d", o.Probe)
	}
	spec := &ebpf.ProgramSpec{
		Name:         name,
		Type:         o.Kind.progType(),
		Instructions: c.a.ins,
		License:      "GPL",
	}
	if o.Kind == KindFentry {
		spec.AttachType, spec.AttachTo = ebpf.AttachTraceFEntry, o.AttachTo
		if o.tpBTF != "" {
			spec.AttachType, spec.AttachTo = ebpf.AttachTraceRawTp, o.tpBTF
		}
	}
	off, total := c.a.raw()
	m := make([]int, total)
	for i := range c.a.ins {
		for r := off[i]; r < off[i+1]; r++ {
			m[r] = -1
			if c.a.rpn[i] >= 0 {
				m[r] = c.first + c.a.rpn[i]
			}
		}
	}
	cc := &Compiled{Spec: spec, Loop: c.loopMode, Regions: len(c.regionFirst), p: p, pi: pi, o: o, rpn: m}
	cc.estimate(tailPaths * c.tailsLen)
	return cc, nil
}

// newCompiler compiles the probe up to the assembler's finish: in loop
// mode when loop is set (or the program needs it), the instructions of
// the blocks of loop mode in functions starting at instructions regions
// (nil: one).
func newCompiler(p *rpn.Program, pi int, o Options, loop bool, regions []int) (*compiler, error) {
	mod := p.Module()
	lw := p.Lowering(pi)
	c := &compiler{
		forceLoop:   loop,
		regionFirst: regions,
		p:           p,
		lw:          lw,
		mod:         mod,
		pr:          &mod.Probes[pi],
		pi:          pi,
		o:           o,
		first:       lw.First,
		n:           lw.N,
		hasCalls:    lw.Needs.Has(rpn.NeedCall),
		logMoves:    lw.Needs.Has(rpn.NeedLog),
		usesTS:      lw.Needs.Has(rpn.NeedTime),
		usesIDs:     lw.Needs.Has(rpn.NeedIDs),
		usesIV:      lw.Needs.Has(rpn.NeedIV),
		is32:        p.WordSize() == 4,
		w:           p.WordSize(),
		logmax:      int32(mod.LogMax),
		user:        o.Kind == KindUprobe || mod.ModType == rpn.ModUser,
		exStubs:     map[[2]int]label{},
		used:        map[label]bool{},
		fieldAt:     map[uint16]int{},
	}
	c.a.cur = -1
	if err := c.check(); err != nil {
		return nil, err
	}
	c.analyze()
	c.findCtxLogs()
	c.names = listing(p, pi)
	c.labels = make([]label, c.n)
	for i := range c.labels {
		c.labels[i] = c.a.newLabel()
	}
	c.lCommit, c.lExcept, c.lDone, c.lSkip = c.a.newLabel(), c.a.newLabel(), c.a.newLabel(), c.a.newLabel()
	c.lEnd = c.lDone
	if r := c.ivRole(); r == IVEntryFirst || r == IVEntry {
		c.lEnd = c.a.newLabel()
	}

	if c.loopMode && c.regionFirst == nil {
		c.regionFirst = []int{0}
	}
	// bpf_loop's bound: every iteration but the first begins at a taken
	// jump, a call or a ret (the jump budget bounds the jumps and calls,
	// and rets are fewer than calls); it is never reached
	c.loops = 2*int(c.mod.JmpMax) + 2
	c.mainFunc()
	if c.loopMode {
		c.callback()
	}
	if c.mapRefErr != nil {
		return nil, c.mapRefErr
	}
	return c, nil
}

// maxBranches bounds the conditional jumps of the code one path of the
// verifier may walk: the straight program's main function, a region of
// loop mode. The verifier keeps the other way of each
// conditional jump a path takes pending until the path ends, and gives
// up past 8192 of them (BPF_COMPLEXITY_LIMIT_JMP_SEQ: "The sequence of
// 8193 jumps is too complex"); a path passes each jump once (the code it
// walks has no cycle), so fewer jumps than that in the code it can walk
// keep it below.
const maxBranches = 4096

// isBranch reports whether in is a conditional jump.
func isBranch(in asm.Instruction) bool {
	cl := in.OpCode.Class()
	if cl != asm.JumpClass && cl != asm.Jump32Class {
		return false
	}
	switch in.OpCode.JumpOp() {
	case asm.Ja, asm.Call, asm.Exit:
		return false
	}
	return true
}

// branches counts the conditional jumps from instruction from on.
func (c *compiler) branches(from int) int {
	n := 0
	for _, in := range c.a.ins[from:] {
		if isBranch(in) {
			n++
		}
	}
	return n
}

// Loop mode's blocks are in functions, the regions, each a global
// function (BTF_FUNC_GLOBAL) of the scratch value and a block id, which
// the verifier checks once, on its own, whatever calls it: the callback
// dispatches on the block id to the region and calls it. A region runs
// its block up to the next taken jump (and returns for the next
// iteration), or to its end, where the callback goes on with the next
// region at its first block. A region holds at most regionInsns eBPF
// instructions (its dispatch reaches its blocks without trampolines) and
// maxBranches conditional jumps (a path of the verifier runs from a
// block's start to the next taken jump or the region's end), and there
// are at most maxRegions (BPF_MAX_SUBPROGS is 256 functions).
const (
	regionInsns = 12288
	maxRegions  = 250
)

// regionStarts cuts loop mode's code into regions, from the code of this
// compiler (one region): the first instruction of each.
func (c *compiler) regionStarts() ([]int, error) {
	per := make([]int, c.n) // conditional jumps of each instruction's code
	size := make([]int, c.n)
	for k, in := range c.a.ins[c.regionAt[0]:] {
		i := c.a.rpn[c.regionAt[0]+k]
		if i < 0 {
			continue
		}
		size[i]++
		if isBranch(in) {
			per[i]++
		}
	}
	// the region's dispatch's jumps are on every path: 2 a level of its
	// tree, and 3 at the leaves
	room := maxBranches - 2*bits.Len(uint(len(c.blocks))) - 3
	starts := []int{0}
	nb, ni := 0, 0
	for i := 0; i < c.n; i++ {
		if !c.live[i] {
			continue
		}
		if (nb+per[i] > room || ni+size[i] > regionInsns) && (nb > 0 || ni > 0) {
			starts = append(starts, i)
			nb, ni = 0, 0
		}
		nb += per[i]
		ni += size[i]
	}
	if len(starts) > maxRegions {
		pc := c.pc(starts[maxRegions])
		return nil, &TooLarge{Probe: c.pi, PC: pc, HasPC: true, Where: position(c.mod, pc), Need: len(starts), Max: maxRegions,
			Limit:  "BPF_MAX_SUBPROGS is 256 functions in a program, with the main one and the loop's",
			Reason: fmt.Sprintf("its code needs %d functions of at most %d eBPF instructions, past the limit from this instruction on", len(starts), regionInsns)}
	}
	return starts, nil
}

// listing maps the byte offset of each instruction of probe pi to its
// disassembly, for the line info the verifier prints.
func listing(p *rpn.Program, pi int) map[uint32]string {
	out := map[uint32]string{}
	for _, l := range strings.Split(p.Listing(pi), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		if f[0] == "=>" {
			f = f[1:]
		}
		pc, err := strconv.ParseUint(f[0], 16, 32)
		if err != nil {
			continue
		}
		out[uint32(pc)] = strings.Join(f[1:], " ")
	}
	return out
}

func (c *compiler) insn(i int) rpn.Insn { return c.p.Insn(c.first + i) }
func (c *compiler) pc(i int) uint32     { return c.p.PC(c.first + i) }

func (c *compiler) unsupported(i int, format string, args ...any) error {
	pc := c.pc(i)
	return &Unsupported{Probe: c.pi, PC: pc, HasPC: true, Where: position(c.mod, pc), Reason: fmt.Sprintf(format, args...)}
}

// pt_regs on x86-64: the offset of each register a kprobe's or uprobe's
// context (and bpf_task_pt_regs) holds.
var ptRegs = map[rpn.Reg]int16{
	rpn.RegR15: 0, rpn.RegR14: 8, rpn.RegR13: 16, rpn.RegR12: 24, rpn.RegRBP: 32, rpn.RegRBX: 40,
	rpn.RegR11: 48, rpn.RegR10: 56, rpn.RegR9: 64, rpn.RegR8: 72, rpn.RegRAX: 80, rpn.RegRCX: 88,
	rpn.RegRDX: 96, rpn.RegRSI: 104, rpn.RegRDI: 112, rpn.RegRIP: 128, rpn.RegCS: 136,
	rpn.RegRFLAGS: 144, rpn.RegRSP: 152, rpn.RegSS: 160,
}

// check refuses what eBPF cannot do, and notes what the program uses.
func (c *compiler) check() error {
	seen := map[rpn.Reg]bool{}
	for i := 0; i < c.n; i++ {
		in := c.insn(i)
		switch in.Op {
		case rpn.OpExit:
			switch in.A {
			case rpn.ExitDump:
				return c.unsupported(i, "exit 3: a dump needs the probed task stopped, and an eBPF program cannot stop it or write a core")
			case rpn.ExitDebugger:
				return c.unsupported(i, "exit 4: handing the kernel to a debugger cannot be done from an eBPF program")
			}
		case rpn.OpPopMrf:
			return c.unsupported(i, "pop mrf: eBPF programs cannot write kernel memory (bpf_probe_write_user writes only user memory and taints the kernel)")
		case rpn.OpPopR:
			return c.unsupported(i, "pop r: eBPF programs cannot change the registers of the probed code")
		case rpn.OpPopU:
			return c.unsupported(i, "pop u: eBPF programs cannot change the task's user-mode registers")
		case rpn.OpPushIO, rpn.OpPopIO:
			return c.unsupported(i, "%s: eBPF programs have no port IO", in.Op)
		case rpn.OpVfyRW:
			return c.unsupported(i, "vfy_rw: an eBPF program can test that memory reads, not that it could be written")
		case rpn.OpPushR:
			r := rpn.Reg(in.B)
			switch c.o.Kind {
			case KindTracepoint, KindRawTracepoint:
				return c.unsupported(i, "push r,%s: a %s has no probed instruction and so no registers (push u reads the task's user-mode registers)", r, c.o.Kind)
			case KindFentry:
				if err := c.fentryReg(i, r); err != nil {
					return err
				}
			}
			if _, ok := ptRegs[r.Canonical()]; !ok {
				return c.unsupported(i, "push r,%s: the probe's pt_regs do not hold %s", r, r.Canonical())
			}
			if !seen[r.Canonical()] {
				seen[r.Canonical()] = true
				c.regs = append(c.regs, r.Canonical())
			}
		case rpn.OpPushU:
			r := rpn.Reg(in.B)
			if _, ok := ptRegs[r.Canonical()]; !ok {
				return c.unsupported(i, "push u,%s: the task's saved user pt_regs do not hold %s", r, r.Canonical())
			}
		case rpn.OpPushField:
			if err := c.checkField(i, in.B); err != nil {
				return err
			}
		case rpn.OpPushArg:
			if c.o.Kind != KindUprobe {
				return c.unsupported(i, "push arg,%d: a usdt probe's arguments are read by a uprobe, not a %s", in.A, c.o.Kind)
			}
			if int(in.A) > len(c.o.Args) || in.A == 0 {
				return c.unsupported(i, "push arg,%d: the probe's note describes %d arguments", in.A, len(c.o.Args))
			}
			if a := c.o.Args[in.A-1]; a.Kind != ArgConst {
				if _, ok := ptRegs[a.Reg.Canonical()]; !ok {
					return c.unsupported(i, "push arg,%d: its register %s is not in the probe's pt_regs", in.A, a.Reg)
				}
				if !seen[a.Reg.Canonical()] {
					seen[a.Reg.Canonical()] = true
					c.regs = append(c.regs, a.Reg.Canonical())
				}
			}
		case rpn.OpLogUStack, rpn.OpLogKStack:
			k := 0
			if in.Op == rpn.OpLogUStack {
				k = 1
			}
			c.stackN[k] = max(c.stackN[k], int(in.A))
		}
		if (in.Op > rpn.OpPushField && in.Op != rpn.OpEnable && in.Op != rpn.OpDisable && in.Op != rpn.OpPushIV && in.Op != rpn.OpPopIV &&
			in.Op != rpn.OpLogUStack && in.Op != rpn.OpLogKStack && in.Op != rpn.OpPushArg) || in.Op == rpn.OpInvalid {
			return c.unsupported(i, "%s: not compiled to eBPF yet", in.Op)
		}
		switch in.Op {
		case rpn.OpNop, rpn.OpJmp, rpn.OpAbort, rpn.OpIncLVI, rpn.OpDecLVI, rpn.OpIncGVI, rpn.OpDecGVI,
			rpn.OpSetMajI, rpn.OpSetMinI:
		case rpn.OpExit:
			if in.A != rpn.ExitNone {
				c.needScratch = true
			}
		default:
			c.needScratch = true
		}
	}
	if c.pr.AutoStack && c.needScratch && c.logmax < 8 {
		return c.unsupported(0, "autostacktrace = yes: logmax %d holds no frame (8 bytes each) of the stack an exception record carries", c.logmax)
	}
	if c.pr.AutoStack && c.needScratch {
		// autostacktrace = yes: the prologue takes the kernel stack,
		// which the exception tail copies to the record (autoStackLog);
		// a program that cannot raise needs no scratch and has none
		c.stackN[0] = max(c.stackN[0], rpn.DefaultStackFrames)
	}
	switch r := c.ivRole(); {
	case (r == IVEntryFirst || r == IVEntry) && c.o.Kind == KindFentry:
		u := c.unsupported(0, "instance variables: the call's entry needs its stack pointer, which a fentry program does not see").(*Unsupported)
		u.Err = ErrNeedsKprobe
		return u
	case (r == IVEntryFirst || r == IVEntry) && c.o.Kind != KindKprobe:
		return c.unsupported(0, "instance variables: a call's entry probe is a kprobe, not a %s", c.o.Kind)
	case r == IVReturn && c.o.Kind != KindKretprobe:
		return c.unsupported(0, "instance variables: a call's return probe is a kretprobe, not a %s", c.o.Kind)
	case r == IVEntryFirst || r == IVEntry:
		c.needScratch = true
	}
	return nil
}

// fentryArgs are the registers of a fentry program's context: the
// arguments, in order (x86-64's calling convention).
var fentryArgs = []rpn.Reg{rpn.RegRDI, rpn.RegRSI, rpn.RegRDX, rpn.RegRCX, rpn.RegR8, rpn.RegR9}

// fentryReg refuses, as ErrNeedsKprobe, a register a fentry program does
// not see.
func (c *compiler) fentryReg(i int, r rpn.Reg) error {
	cr := r.Canonical()
	if cr == rpn.RegRIP {
		if c.o.Addr == 0 {
			u := c.unsupported(i, "push r,%s: a fentry probe needs the function's address (Options.Addr) for rip", r).(*Unsupported)
			u.Err = ErrNeedsKprobe
			return u
		}
		return nil
	}
	for k, a := range fentryArgs {
		if a != cr {
			continue
		}
		if k < c.o.NumArgs {
			return nil
		}
		u := c.unsupported(i, "push r,%s: a fentry program sees the function's arguments only, and %s would be argument %d of %d", r, cr, k+1, c.o.NumArgs).(*Unsupported)
		u.Err = ErrNeedsKprobe
		return u
	}
	u := c.unsupported(i, "push r,%s: a fentry program sees the function's arguments only (rdi, rsi, rdx, rcx, r8, r9) and rip", r).(*Unsupported)
	u.Err = ErrNeedsKprobe
	return u
}

// fentryArg is the index of canonical register r among the arguments.
func fentryArg(r rpn.Reg) int {
	for k, a := range fentryArgs {
		if a == r {
			return k
		}
	}
	return -1
}

// checkField resolves push field's operand in the event's format, once
// per field.
func (c *compiler) checkField(i int, idx uint16) error {
	if c.o.Kind != KindTracepoint {
		return c.unsupported(i, "push field needs a tracepoint probe (tracepoint = SUBSYS:EVENT); this one is a %s", c.o.Kind)
	}
	if _, ok := c.fieldAt[idx]; ok {
		return nil
	}
	if int(idx) >= len(c.mod.Fields) {
		return c.unsupported(i, "push field %d: the module names %d fields", idx, len(c.mod.Fields))
	}
	name := c.mod.Fields[idx]
	if c.o.Format == nil {
		return c.unsupported(i, "push field,%s: the event's format was not given (Options.Format)", name)
	}
	fd, err := c.o.Format.Field(name)
	if err != nil {
		return c.unsupported(i, "push field,%s: %v", name, err)
	}
	if fd.Common && name != "common_type" && name != "common_pid" {
		return c.unsupported(i, "push field,%s: an eBPF program cannot read it: the kernel writes a pointer to the registers over the record's first 8 bytes, its common fields, before it runs the program (common_type and common_pid can be had: the event's id and the thread's)", name)
	}
	if len(c.fields) == numRegs {
		return c.unsupported(i, "push field,%s: more than %d different fields in one probe", name, numRegs)
	}
	c.fieldAt[idx] = len(c.fields)
	c.fields = append(c.fields, fd)
	return nil
}

// analyze chooses the mode (doc.go) and the stack addressing from rpn's
// lowering of the probe (the cycles, the live instructions, the most
// jumps of a path, the stack), which the machine and package jit read
// too.
func (c *compiler) analyze() {
	c.cyclic = c.lw.Cyclic
	c.loopMode = c.cyclic || c.hasCalls || c.o.Loop || c.forceLoop
	c.live = c.lw.Live
	if c.loopMode {
		c.needScratch = true
	} else if c.lw.MostJumps > int(c.mod.JmpMax) {
		// straight mode has no cycle and no call: the most jumps any
		// path takes is known
		c.countJumps = true
		c.needScratch = true
	}
	c.stackAnalysis()
	c.findJoins()
}

// findJoins marks the instructions where paths meet, which start with
// the registers that carry the machine's state between instructions (the
// log length, the TOS index, the jumps left) loaded from the scratch
// value, where every path into them stored them (spill): every path then
// reaches the instruction in the same verifier state, and the verifier
// walks the code from there once (doc.go, "Verification cost"). In loop
// mode every block start is one (the dispatch enters them); in straight
// mode those with two ways in or more (the code before falls into it, or
// jumps go there).
func (c *compiler) findJoins() {
	c.fill = make([]bool, c.n)
	if !c.needScratch {
		return // nothing lives in registers from one instruction to the next
	}
	if c.loopMode {
		c.findBlocks()
		for _, i := range c.blocks {
			c.fill[i] = true
		}
		return
	}
	if !c.logMoves && c.static && !c.countJumps {
		return // every path has the same log length (0), TOS index and no jump count
	}
	for i, n := range c.lw.Ways { // the entry's way in is the prologue
		c.fill[i] = c.live[i] && n > 1
	}
}

// fallsInto reports whether the code emitted for the instruction before
// live instruction i runs on into i's (the prologue into instruction 0
// in straight mode).
func (c *compiler) fallsInto(i int) bool {
	if i == 0 {
		return !c.inCB
	}
	if !c.live[i-1] {
		return false
	}
	op := c.insn(i - 1).Op
	return !op.Ends() && !(c.inCB && op == rpn.OpCall)
}

// spill stores the registers a join loads (fillRegs).
func (c *compiler) spill() {
	if c.logMoves || c.loopMode {
		c.emit(asm.StoreMem(rScratch, offLogN, rLogN, asm.DWord))
	}
	if !c.static {
		c.emit(asm.StoreMem(rScratch, offTOS, rTOS, asm.DWord))
	}
	if c.countJumps {
		c.emit(asm.StoreMem(rScratch, offJumps, rJumps, asm.DWord))
	}
}

// fillRegs loads them, bounded as every instruction's code expects.
func (c *compiler) fillRegs() {
	if c.logMoves || c.loopMode {
		c.emit(asm.LoadMem(rLogN, rScratch, offLogN, asm.DWord))
		c.clampLog(false)
	}
	if !c.static {
		c.emit(asm.LoadMem(rTOS, rScratch, offTOS, asm.DWord), asm.And.Imm(rTOS, 31))
	}
	if c.countJumps {
		c.emit(asm.LoadMem(rJumps, rScratch, offJumps, asm.DWord))
	}
}

// stackAnalysis is the lowering's: static-stack mode when every path
// agrees on the TOS index, and the slots to zero.
func (c *compiler) stackAnalysis() {
	l := c.lw.Stack
	c.needZero = l.NeedZero
	if !l.Static {
		return
	}
	c.static = true
	c.reach, c.depth = l.Reach, l.Depth
}

// ---- maps

func (c *compiler) mapRef(dst asm.Register, name string, m *ebpf.Map, value bool, off uint32) {
	var in asm.Instruction
	if value {
		in = asm.LoadMapValue(dst, 0, off)
	} else {
		in = asm.LoadMapPtr(dst, 0)
	}
	if m != nil {
		if err := in.AssociateMap(m); err != nil && c.mapRefErr == nil {
			c.mapRefErr = err
		}
	} else {
		in = in.WithReference(name)
	}
	c.a.emit(in)
}

func (c *compiler) maps() *Maps {
	if c.o.Maps == nil {
		return &Maps{}
	}
	return c.o.Maps
}

// counters loads into dst the address of field off of the probe's counters.
func (c *compiler) counters(dst asm.Register, off int) {
	c.mapRef(dst, MapCounters, c.maps().Counters, true, uint32(GlobalsSize+int(c.o.Probe)*CountersSize+off))
}

func (c *compiler) globals(dst asm.Register, off int) {
	c.mapRef(dst, MapCounters, c.maps().Counters, true, uint32(off))
}

func (c *compiler) varsBase(dst asm.Register, gv bool, off int) {
	if gv {
		c.mapRef(dst, MapGV, c.maps().GV, true, uint32(off))
	} else {
		c.mapRef(dst, MapLV, c.maps().LV, true, uint32(off))
	}
}

// ---- small emitters

func (c *compiler) emit(ins ...asm.Instruction) { c.a.emit(ins...) }

// fetchAdd: src = atomic fetch-and-add(*(dst+off), src). cilium/ebpf
// v0.22.0 drops the BPF_FETCH flag when it marshals an atomic (it takes
// the immediate before it sets it), so the immediate is set here.
func fetchAdd(dst, src asm.Register, size asm.Size, off int16) asm.Instruction {
	in := asm.FetchAdd.Mem(dst, src, size, off)
	in.Constant = int64(asm.FetchAdd >> 8)
	return in
}

func atomicAdd(dst, src asm.Register, size asm.Size, off int16) asm.Instruction {
	return asm.AddAtomic.Mem(dst, src, size, off)
}

// movImm64 loads any 64-bit constant.
func movImm64(dst asm.Register, v uint64) asm.Instruction {
	if int64(v) == int64(int32(v)) {
		return asm.Mov.Imm(dst, int32(v))
	}
	return asm.LoadImm(dst, int64(v), asm.DWord)
}

// storeImm64 stores a sign-extended 32-bit immediate as 8 bytes (BPF_ST
// BPF_DW, which asm.StoreImm does not make).
func storeImm64(dst asm.Register, off int16, v int32) asm.Instruction {
	return asm.Instruction{OpCode: asm.StoreImmOp(asm.DWord), Dst: dst, Offset: off, Constant: int64(v)}
}

func hdr(off int) int16 { return int16(offHeader + off) }

// slot is the base register and offset of stack entry k below the TOS;
// in dynamic mode the address is computed into tmp.
func (c *compiler) slot(k int, tmp asm.Register) (asm.Register, int16) {
	if c.static {
		return rScratch, int16(offStack + ((c.d-k)&31)*8)
	}
	c.emit(asm.Mov.Reg(tmp, rTOS))
	if k&31 != 0 {
		c.emit(asm.Add.Imm(tmp, int32(-k)), asm.And.Imm(tmp, 31))
	}
	c.emit(asm.LSh.Imm(tmp, 3), asm.Add.Reg(tmp, rScratch))
	return tmp, offStack
}

func (c *compiler) load(dst asm.Register, k int, tmp asm.Register) {
	b, off := c.slot(k, tmp)
	c.emit(asm.LoadMem(dst, b, off, asm.DWord))
}

func (c *compiler) store(k int, src, tmp asm.Register) {
	b, off := c.slot(k, tmp)
	c.emit(asm.StoreMem(b, off, src, asm.DWord))
}

// slotPtr computes the address of stack entry k into dst.
func (c *compiler) slotPtr(k int, dst asm.Register) {
	b, off := c.slot(k, dst)
	if b != dst {
		c.emit(asm.Mov.Reg(dst, b))
	}
	c.emit(asm.Add.Imm(dst, int32(off)))
}

func (c *compiler) adjust(delta int) {
	if c.static {
		c.d = (c.d + delta) & 31
		return
	}
	if delta&31 != 0 {
		c.emit(asm.Add.Imm(rTOS, int32(delta)), asm.And.Imm(rTOS, 31))
	}
}

func (c *compiler) push(src asm.Register) {
	c.adjust(1)
	c.store(0, src, asm.R5)
}

// maskW masks r to the word width (32-bit modules).
func (c *compiler) maskW(r asm.Register) {
	if c.is32 {
		c.emit(asm.Mov.Reg32(r, r))
	}
}

// clampLog bounds the log length for the verifier, and marks the log
// truncated when a write went past logmax.
//
// The cut is out of line, after the function's body: the verifier
// explores the path that falls through first (the length a range up to
// logmax) and then the cut's (the length logmax), which lies within it,
// so that it stops there rather than going on with a second state.
func (c *compiler) clampLog(truncate bool) {
	back := c.a.newLabel()
	cut := c.later(func() {
		c.emit(asm.Mov.Imm(rLogN, c.logmax))
		if truncate {
			c.emit(asm.StoreImm(rScratch, hdr(HdrTruncated), 1, asm.Byte))
		}
		c.a.ja(back)
	})
	c.a.jmpImm(asm.JGT, rLogN, c.logmax, cut, false)
	c.a.bind(back)
}

// later queues out-of-line code, emitted after the body of the current
// function, with the TOS index of now.
func (c *compiler) later(f func()) label {
	l := c.a.newLabel()
	d, cur := c.d, c.a.cur
	c.stubs = append(c.stubs, func() {
		c.d, c.a.cur = d, cur
		c.a.bind(l)
		f()
	})
	return l
}

func (c *compiler) flushStubs() {
	for len(c.stubs) > 0 {
		f := c.stubs[0]
		c.stubs = c.stubs[1:]
		f()
	}
}

// raise returns the label of code raising ex at instruction i, address 0.
func (c *compiler) raise(ex rpn.Exception, i int) label {
	k := [2]int{int(ex), i}
	if l, ok := c.exStubs[k]; ok {
		return l
	}
	l := c.later(func() {
		c.emit(asm.Mov.Imm(asm.R1, 0))
		c.raiseTail(ex, i)
	})
	c.exStubs[k] = l
	return l
}

// raiseAddr returns the label of code raising invalid-address at
// instruction i with the address kept at fpAddr.
func (c *compiler) raiseAddr(i int) label {
	return c.later(func() {
		c.emit(asm.LoadMem(asm.R1, asm.R10, fpAddr, asm.DWord))
		c.raiseTail(rpn.ExInvalidAddress, i)
	})
}

// raiseTail: r1 the address.
func (c *compiler) raiseTail(ex rpn.Exception, i int) {
	c.emit(
		asm.StoreMem(rScratch, hdr(HdrAddr), asm.R1, asm.DWord),
		asm.StoreImm(rScratch, hdr(HdrException), int64(ex), asm.Byte),
		asm.StoreImm(rScratch, hdr(HdrPC), int64(c.pc(i)), asm.Word),
	)
	c.stop(statusException, c.lExcept)
}

// stop ends the program: in the main function by jumping to l, in the
// loop callback by setting the status and returning 1.
func (c *compiler) stop(status int32, l label) {
	if !c.inCB {
		c.used[l] = true
		c.a.ja(l)
		return
	}
	if status == statusCommit {
		c.emit(asm.StoreMem(rScratch, offLogN, rLogN, asm.DWord))
	}
	c.emit(
		storeImm64(rScratch, offStatus, status),
		asm.Mov.Imm(asm.R0, 1),
		asm.Return(),
	)
}

// probeRead calls bpf_probe_read_{kernel,user}[_str] with r1 dst, r2 size,
// r3 src: user memory for a process's probe; for a kernel probe chosen
// by the address, the user half of x86-64's address space (below
// 1<<47) being the current task's.
func (c *compiler) probeRead(str bool) {
	kfn, ufn := asm.FnProbeReadKernel, asm.FnProbeReadUser
	if str {
		kfn, ufn = asm.FnProbeReadKernelStr, asm.FnProbeReadUserStr
	}
	if c.user {
		c.emit(ufn.Call())
		return
	}
	user, after := c.a.newLabel(), c.a.newLabel()
	c.emit(asm.Mov.Reg(asm.R0, asm.R3), asm.RSh.Imm(asm.R0, 47))
	c.a.jmpImm(asm.JEq, asm.R0, 0, user, false)
	c.emit(kfn.Call())
	c.a.ja(after)
	c.a.bind(user)
	c.emit(ufn.Call())
	c.a.bind(after)
}

// ---- the functions

var (
	typLong = &btf.Int{Name: "long", Size: 8, Encoding: btf.Signed}
	typPtr  = &btf.Pointer{Target: &btf.Void{}}
)

func (c *compiler) funcStart(name string, linkage btf.FuncLinkage, params []btf.FuncParam) {
	fn := &btf.Func{Name: name, Linkage: linkage, Type: &btf.FuncProto{Return: typLong, Params: params}}
	c.a.note(name)
	c.a.emit(btf.WithFuncMetadata(asm.Mov.Imm(asm.R0, 0).WithSymbol(name), fn))
}

// lookupScratch sets r6 to this CPU's scratch value, or jumps to fail.
func (c *compiler) lookupScratch(fail label) {
	if perCPU(int(c.logmax)) {
		c.emit(asm.StoreImm(asm.R10, fpKey, int64(c.o.Probe), asm.Word))
	} else {
		c.emit(
			asm.FnGetSmpProcessorId.Call(),
			asm.Mul.Imm(asm.R0, int32(c.p.NumProbes())),
			asm.Add.Imm(asm.R0, int32(c.o.Probe)),
			asm.StoreMem(asm.R10, fpKey, asm.R0, asm.Word),
		)
	}
	c.mapRef(asm.R1, MapScratch, c.maps().Scratch, false, 0)
	c.emit(asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, fpKey), asm.FnMapLookupElem.Call())
	c.a.jmpImm(asm.JEq, asm.R0, 0, fail, false)
	c.emit(asm.Mov.Reg(rScratch, asm.R0))
}

func (c *compiler) mainFunc() {
	a := &c.a
	pr := c.pr
	c.funcStart(progName(c.o), btf.GlobalFunc, []btf.FuncParam{{Name: "ctx", Type: typPtr}})
	a.note("prologue")
	c.emit(asm.Mov.Reg(rJumps, asm.R1)) // the context, until the registers are copied
	if len(c.ctxLog) > 0 {
		c.emit(asm.StoreMem(asm.R10, fpCtx, asm.R1, asm.DWord)) // for log mrf of a field (ctxlog.go)
	}

	// a hit of another process or thread is not a hit of this probe
	if c.o.Follow != nil {
		// the process (tgid) in the set of a process and those it
		// started (follow_linux.go)
		c.emit(asm.FnGetCurrentPidTgid.Call(), asm.RSh.Imm(asm.R0, 32), asm.StoreMem(asm.R10, fpKey, asm.R0, asm.Word))
		c.mapRef(asm.R1, "gp_follow", c.o.Follow, false, 0)
		c.emit(asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, fpKey), asm.FnMapLookupElem.Call())
		a.jmpImm(asm.JEq, asm.R0, 0, c.lDone, false)
	}
	if c.o.Follow == nil && c.o.PID != 0 || c.o.TID != 0 {
		c.emit(asm.FnGetCurrentPidTgid.Call())
		if c.o.TID != 0 {
			c.emit(asm.Mov.Reg32(asm.R1, asm.R0))
			a.jmpImm(asm.JNE, asm.R1, int32(c.o.TID), c.lDone, true)
		}
		if c.o.PID != 0 && c.o.Follow == nil {
			c.emit(asm.Mov.Reg(asm.R1, asm.R0), asm.RSh.Imm(asm.R1, 32))
			a.jmpImm(asm.JNE, asm.R1, int32(c.o.PID), c.lDone, true)
		}
	}

	// a return ends its call's instance, switched off or skipped (iv.go)
	if c.ivRole() == IVReturn {
		c.ivReturn()
	}

	// switched off: no hit at all (switch.go)
	c.switchCheck()
	c.countProcess()

	// counters, pass count, max hits (jit/compile.go, prologue)
	c.counters(asm.R1, 0)
	if pr.PassCount > 0 {
		// the hit's number, counted disabled or not, as the machine does
		c.emit(asm.Mov.Imm(asm.R0, 1), fetchAdd(asm.R1, asm.R0, asm.DWord, cntHits), asm.Add.Imm(asm.R0, 1))
	}
	c.emit(asm.LoadMem(asm.R2, asm.R1, cntDisabled, asm.DWord))
	a.jmpImm(asm.JNE, asm.R2, 0, c.lSkip, false)
	if pr.PassCount > 0 {
		c.emit(movImm64(asm.R2, pr.PassCount))
		a.jmpReg(asm.JLE, asm.R0, asm.R2, c.lSkip)
	}
	if pr.MaxHits > 0 {
		c.emit(asm.Mov.Imm(asm.R0, 1), fetchAdd(asm.R1, asm.R0, asm.DWord, cntRuns), asm.Add.Imm(asm.R0, 1))
		c.emit(movImm64(asm.R2, pr.MaxHits))
		run := a.newLabel()
		a.jmpReg(asm.JLT, asm.R0, asm.R2, run)
		over := c.later(func() {
			// another CPU made run MaxHits meanwhile: not a run
			c.counters(asm.R1, 0)
			c.emit(asm.Mov.Imm(asm.R0, -1), atomicAdd(asm.R1, asm.R0, asm.DWord, cntRuns))
			a.ja(c.lSkip)
		})
		a.jmpReg(asm.JGT, asm.R0, asm.R2, over)
		c.emit(asm.Mov.Imm(asm.R0, 1), asm.StoreMem(asm.R1, cntDisabled, asm.R0, asm.DWord))
		a.bind(run)
	} else {
		c.emit(asm.Mov.Imm(asm.R0, 1), atomicAdd(asm.R1, asm.R0, asm.DWord, cntRuns))
	}

	if c.needScratch {
		c.lookupScratch(c.lDone)
		// the header: major, minor; exit, exception, truncated, flags; pc; addr
		c.emit(
			asm.StoreImm(rScratch, hdr(HdrMajor), int64(uint32(c.mod.Major)|uint32(pr.Minor)<<16), asm.Word),
			asm.StoreImm(rScratch, hdr(HdrExit), 0, asm.Word),
			asm.StoreImm(rScratch, hdr(HdrPC), 0, asm.Word),
			asm.Mov.Imm(asm.R1, 0),
			asm.StoreMem(rScratch, hdr(HdrAddr), asm.R1, asm.DWord),
			asm.Mov.Imm(rLogN, 0),
		)
		for _, r := range c.regs {
			switch {
			case c.o.Kind == KindFentry && r == rpn.RegRIP:
				c.emit(movImm64(asm.R1, c.o.Addr))
			case c.o.Kind == KindFentry:
				c.emit(asm.LoadMem(asm.R1, rJumps, int16(fentryArg(r)*8), asm.DWord))
			default:
				c.emit(asm.LoadMem(asm.R1, rJumps, ptRegs[r], asm.DWord))
				if r == rpn.RegRIP && c.o.Kind == KindKprobe {
					c.emit(asm.Add.Imm(asm.R1, -1)) // regs->ip is past the int3
				}
			}
			c.emit(asm.StoreMem(rScratch, int16(offRegs+int(r)*8), asm.R1, asm.DWord))
		}
		if len(c.o.Biased) > 0 {
			// the process's load bias: where the probe is minus where
			// it was linked
			c.emit(
				asm.LoadMem(asm.R1, rJumps, ptRegs[rpn.RegRIP], asm.DWord),
				movImm64(asm.R2, c.o.Addr),
				asm.Sub.Reg(asm.R1, asm.R2),
				asm.StoreMem(rScratch, offBias, asm.R1, asm.DWord),
			)
		}
		for k, fd := range c.fields {
			c.copyField(fd, int16(offFields+k*8))
		}
		c.ivScratch()
		c.getStacks()
		if c.usesTS {
			c.timestamp()
		}
		if c.usesIDs {
			// one helper call for push pid, push tid and the record
			c.emit(asm.FnGetCurrentPidTgid.Call(), asm.StoreMem(rScratch, hdr(HdrTID), asm.R0, asm.DWord))
		}
		if c.needZero != 0 {
			c.emit(asm.Mov.Imm(asm.R1, 0))
			for s := range 32 {
				if c.needZero&(1<<s) != 0 {
					c.emit(asm.StoreMem(rScratch, int16(offStack+s*8), asm.R1, asm.DWord))
				}
			}
		}
		if !c.static {
			c.emit(asm.Mov.Imm(rTOS, 0))
		}
		if c.countJumps {
			c.emit(asm.Mov.Imm(rJumps, int32(c.mod.JmpMax)))
		}
	}

	if c.loopMode {
		c.startLoop()
	} else {
		c.body(0, c.n)
	}
	c.flushStubs()
	t0 := len(c.a.ins)
	c.tails()
	c.flushStubs()
	c.tailsLen = len(c.a.ins) - t0
}

// maxCtxLoad bounds the offsets a tracepoint program loads from its
// context directly: the kernel allows any below PERF_MAX_TRACE_SIZE
// (8192 since Linux 5.x; 2048 before), aligned to the size and not in the
// first 8 bytes.
const maxCtxLoad = 2048

// ctxLoad sets r1 to the size bytes at off in the tracepoint's record (r9,
// the context), zero-extended, or sign-extended with signed: a load from
// the context when the kernel allows it, else bpf_probe_read_kernel of
// the record's bytes (which cannot fail: the record is the kernel's
// buffer of the hit; r1 stays 0 if it did).
func (c *compiler) ctxLoad(off, size int, signed bool) {
	sz := map[int]asm.Size{1: asm.Byte, 2: asm.Half, 4: asm.Word, 8: asm.DWord}[size]
	if off >= 8 && off%size == 0 && off+size <= maxCtxLoad {
		c.emit(asm.LoadMem(asm.R1, rJumps, int16(off), sz))
	} else {
		c.emit(
			storeImm64(asm.R10, fpAddr, 0),
			asm.Mov.Reg(asm.R1, asm.R10), asm.Add.Imm(asm.R1, fpAddr),
			asm.Mov.Imm(asm.R2, int32(size)),
			asm.Mov.Reg(asm.R3, rJumps), asm.Add.Imm(asm.R3, int32(off)),
			asm.FnProbeReadKernel.Call(),
			asm.LoadMem(asm.R1, asm.R10, fpAddr, asm.DWord),
		)
	}
	if signed && size < 8 {
		sh := int32(64 - 8*size)
		c.emit(asm.LSh.Imm(asm.R1, sh), asm.ArSh.Imm(asm.R1, sh))
	}
}

// copyField stores tracepoint field fd's value, what push field pushes,
// at off in the scratch value (prologue: r9 is the context).
func (c *compiler) copyField(fd *Field, off int16) {
	// ctxAddr: r1 = the record's address + add, a number (the context
	// pointer stored and read back, so that the verifier sees a scalar)
	ctxAddr := func(add int32) {
		c.emit(asm.StoreMem(rScratch, off, rJumps, asm.DWord), asm.LoadMem(asm.R1, rScratch, off, asm.DWord))
		if add != 0 {
			c.emit(asm.Add.Imm(asm.R1, add))
		}
	}
	switch {
	case fd.Name == "common_type":
		c.emit(movImm64(asm.R1, uint64(c.o.Format.ID)))
	case fd.Name == "common_pid":
		c.emit(asm.FnGetCurrentPidTgid.Call(), asm.Mov.Reg32(asm.R1, asm.R0))
	case fd.Kind == FieldScalar || fd.Kind == FieldPointer:
		c.ctxLoad(fd.Offset, fd.Size, fd.Signed && fd.Kind == FieldScalar)
	case fd.Kind == FieldArray:
		ctxAddr(int32(fd.Offset))
	case fd.Kind == FieldDataLoc || fd.Kind == FieldRelLoc:
		c.ctxLoad(fd.Offset, 4, false)
		c.emit(asm.And.Imm(asm.R1, 0xffff))
		if fd.Kind == FieldRelLoc {
			c.emit(asm.Add.Imm(asm.R1, int32(fd.Offset+fd.Size)))
		}
		c.emit(asm.Mov.Reg(asm.R2, asm.R1))
		ctxAddr(0)
		c.emit(asm.Add.Reg(asm.R1, asm.R2))
	}
	c.emit(asm.StoreMem(rScratch, off, asm.R1, asm.DWord))
}

// timestamp stores the hit's time in the header: CLOCK_MONOTONIC plus the
// offset to Unix time the loader keeps in the globals.
func (c *compiler) timestamp() {
	c.emit(asm.FnKtimeGetNs.Call())
	c.globals(asm.R1, offClockDelta)
	c.emit(
		asm.LoadMem(asm.R1, asm.R1, 0, asm.DWord),
		asm.Add.Reg(asm.R0, asm.R1),
		asm.StoreMem(rScratch, hdr(HdrTS), asm.R0, asm.DWord),
	)
}

// tails: commit, exception, skip, done (main function).
func (c *compiler) tails() {
	a := &c.a
	a.cur = -1
	if c.used[c.lExcept] {
		a.bind(c.lExcept)
		a.note("exception")
		c.counters(asm.R1, cntFaults)
		c.emit(
			asm.Mov.Imm(asm.R2, 1),
			atomicAdd(asm.R1, asm.R2, asm.DWord, 0),
			asm.Mov.Imm(rLogN, 0),
			asm.StoreImm(rScratch, hdr(HdrExit), 0, asm.Byte),
			asm.StoreImm(rScratch, hdr(HdrTruncated), 0, asm.Byte),
			asm.StoreImm(rScratch, hdr(HdrFlags), 0, asm.Byte),
		)
		if c.pr.AutoStack {
			c.autoStackLog()
		}
	}
	if c.used[c.lExcept] || c.used[c.lCommit] {
		a.bind(c.lCommit)
		a.note("commit")
		c.clampLog(false)
		c.emit(
			asm.StoreMem(rScratch, hdr(HdrLogLen), rLogN, asm.Word),
			asm.StoreImm(rScratch, hdr(HdrProbe), int64(c.o.Probe), asm.Word),
			asm.FnGetSmpProcessorId.Call(),
			asm.StoreMem(rScratch, hdr(HdrCPU), asm.R0, asm.Word),
		)
		if !c.usesIDs { // else in the header since the prologue
			c.emit(asm.FnGetCurrentPidTgid.Call(), asm.StoreMem(rScratch, hdr(HdrTID), asm.R0, asm.DWord)) // tid, then pid
		}
		if !c.usesTS {
			c.timestamp()
		}
		// the command name: a process of a global probe may be gone
		// before its record is read
		c.emit(
			asm.Mov.Reg(asm.R1, rScratch),
			asm.Add.Imm(asm.R1, int32(hdr(HdrComm))),
			asm.Mov.Imm(asm.R2, 16),
			asm.FnGetCurrentComm.Call(),
		)
		wake := c.o.Wakeup
		if wake == 0 {
			wake = DefaultWakeup
		}
		if wake > 0 {
			const availData, noWakeup, forceWakeup = 0, 1, 2 // BPF_RB_*
			c.mapRef(asm.R1, MapRing, c.maps().Ring, false, 0)
			c.emit(asm.Mov.Imm(asm.R2, availData), asm.FnRingbufQuery.Call(), asm.Mov.Imm(asm.R4, noWakeup))
			// wake the reader once, on the commit that brings the bytes
			// waiting up to the threshold: past it the reader was woken
			// already (or polls), and a wakeup a record cost 240-260 ns
			// a hit here (2.4 us with a reader behind)
			few := a.newLabel()
			a.jmpImm(asm.JGE, asm.R0, int32(wake), few, false)
			c.emit(asm.Add.Reg(asm.R0, rLogN), asm.Add.Imm(asm.R0, HeaderSize+8))
			a.jmpImm(asm.JLT, asm.R0, int32(wake), few, false)
			c.emit(asm.Mov.Imm(asm.R4, forceWakeup))
			a.bind(few)
		} else {
			c.emit(asm.Mov.Imm(asm.R4, 0))
		}
		c.mapRef(asm.R1, MapRing, c.maps().Ring, false, 0)
		c.emit(
			asm.Mov.Reg(asm.R2, rScratch),
			asm.Add.Imm(asm.R2, offHeader),
			asm.Mov.Reg(asm.R3, rLogN),
			asm.Add.Imm(asm.R3, HeaderSize),
			asm.FnRingbufOutput.Call(),
		)
		a.jmpImm(asm.JEq, asm.R0, 0, c.lEnd, false)
		c.counters(asm.R1, cntLost)
		c.emit(asm.Mov.Imm(asm.R2, 1), atomicAdd(asm.R1, asm.R2, asm.DWord, 0))
		a.ja(c.lEnd)
	}
	if c.lEnd != c.lDone {
		a.bind(c.lEnd)
		a.note("instance saved")
		c.ivSave()
		a.ja(c.lDone)
	}
	a.bind(c.lSkip)
	a.note("skipped")
	c.counters(asm.R1, cntSkipped)
	c.emit(asm.Mov.Imm(asm.R2, 1), atomicAdd(asm.R1, asm.R2, asm.DWord, 0))
	a.bind(c.lDone)
	c.emit(asm.Mov.Imm(asm.R0, 0), asm.Return())
}

func progName(o Options) string {
	if o.Name != "" {
		return o.Name
	}
	return fmt.Sprintf("gp_%d", o.Probe)
}

// ---- loop mode

// startLoop runs the callback with bpf_loop, then acts on the status it
// left. Every iteration runs from a block start to a taken jump (or ret);
// the callback checks the jump budget itself, so the iterations bpf_loop
// allows (jmpmax jumps, as many rets, the first block) are never all used.
func (c *compiler) startLoop() {
	a := &c.a
	c.emit(
		asm.Mov.Imm(asm.R1, 0),
		asm.StoreMem(rScratch, offLogN, asm.R1, asm.DWord),
		asm.StoreMem(rScratch, offTOS, asm.R1, asm.DWord),
		asm.StoreMem(rScratch, offDepth, asm.R1, asm.DWord),
		asm.StoreMem(rScratch, offBlock, asm.R1, asm.DWord),
		asm.StoreMem(rScratch, offStatus, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R1, int32(c.mod.JmpMax)),
		asm.StoreMem(rScratch, offJumps, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R1, int32(c.loops)),
		asm.Instruction{OpCode: asm.LoadImmOp(asm.DWord), Dst: asm.R2, Src: asm.PseudoFunc, Constant: -1}.WithReference(cbName(c.o)),
		asm.Mov.Imm(asm.R3, 0),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnLoop.Call(),
		asm.LoadMem(asm.R1, rScratch, offStatus, asm.DWord),
	)
	c.used[c.lExcept], c.used[c.lCommit] = true, true
	a.jmpImm(asm.JEq, asm.R1, statusNone, c.lEnd, false)
	a.jmpImm(asm.JEq, asm.R1, statusException, c.lExcept, false)
	commit := a.newLabel()
	a.jmpImm(asm.JEq, asm.R1, statusCommit, commit, false)
	// never: the callback stops on every path before bpf_loop runs out
	c.emit(asm.Mov.Imm(asm.R1, 0))
	c.raiseTail(rpn.ExMaxJumps, 0)
	a.bind(commit)
	c.emit(asm.LoadMem(rLogN, rScratch, offLogN, asm.DWord))
	a.ja(c.lCommit)
}

// findBlocks numbers the blocks of loop mode: the lowering's (the entry,
// the jump targets and the instructions after a call) and the regions'
// first instructions.
func (c *compiler) findBlocks() {
	start := slices.Clone(c.lw.BlockStart)
	for _, i := range c.regionFirst {
		start[i] = true
	}
	c.blockID = map[int]int{}
	c.blocks = nil
	for i, b := range start { // ids in instruction order
		if b {
			c.blockID[i] = len(c.blocks)
			c.blocks = append(c.blocks, i)
		}
	}
}

func cbName(o Options) string { return progName(o) + "_cb" }

// callback is the loop body: static long cb(u64 index, void *ctx). It
// finds the region of the block to run and calls it: 0, the next
// iteration; 1, stop; regionFalls, the region's code went on past its
// end: the next region, at its first block, at once.
func (c *compiler) callback() {
	a := &c.a
	a.cur = -1
	c.funcStart(cbName(c.o), btf.StaticFunc, []btf.FuncParam{{Name: "index", Type: typLong}, {Name: "ctx", Type: typPtr}})
	out, ret, zero := a.newLabel(), a.newLabel(), a.newLabel()
	c.lookupScratch(out)
	c.emit(asm.LoadMem(asm.R2, rScratch, offBlock, asm.DWord))
	leaves := make([]label, len(c.regionFirst))
	for k := range leaves {
		leaves[k] = a.newLabel()
	}
	c.dispatchRegions(0, len(leaves), leaves)
	for k := range leaves {
		a.bind(leaves[k])
		c.emit(asm.Mov.Reg(asm.R1, rScratch), asm.Call.Label(c.regionName(k)))
		if k+1 < len(leaves) {
			a.jmpImm(asm.JNE, asm.R0, regionFalls, ret, false)
			c.emit(asm.Mov.Imm(asm.R2, int32(c.blockID[c.regionFirst[k+1]])))
		}
	}
	a.bind(ret)
	a.jmpImm(asm.JEq, asm.R0, 0, zero, false)
	a.bind(out)
	c.emit(asm.Mov.Imm(asm.R0, 1), asm.Return())
	a.bind(zero)
	c.emit(asm.Mov.Imm(asm.R0, 0), asm.Return())
	for k := range c.regionFirst {
		c.regionFunc(k)
	}
}

// regionFalls is what a region returns when its code went on past its
// end.
const regionFalls = 2

func (c *compiler) regionName(k int) string { return fmt.Sprintf("%s_r%d", progName(c.o), k) }

// regionEnd is the instruction after region k's.
func (c *compiler) regionEnd(k int) int {
	if k+1 < len(c.regionFirst) {
		return c.regionFirst[k+1]
	}
	return c.n
}

// dispatchRegions jumps to leaves[k] for the region k of the block whose
// id r2 holds, for regions lo..hi-1: a binary search.
func (c *compiler) dispatchRegions(lo, hi int, leaves []label) {
	a := &c.a
	if hi-lo == 1 {
		a.ja(leaves[lo])
		return
	}
	mid := (lo + hi) / 2
	right := a.newLabel()
	a.jmpImm(asm.JGE, asm.R2, int32(c.blockID[c.regionFirst[mid]]), right, false)
	c.dispatchRegions(lo, mid, leaves)
	a.bind(right)
	c.dispatchRegions(mid, hi, leaves)
}

// scratchType is the scratch value as a region's argument: a region is
// checked against its signature, and a pointer to a type of known size is
// memory of that size (or NULL).
func (c *compiler) scratchType() btf.Type {
	n := uint32(ScratchSize(int(c.logmax)))
	u8 := &btf.Int{Name: "unsigned char", Size: 1}
	return &btf.Pointer{Target: &btf.Struct{Name: "gp_scratch", Size: n, Members: []btf.Member{
		{Name: "b", Type: &btf.Array{Index: &btf.Int{Name: "int", Size: 4}, Type: u8, Nelems: n}},
	}}}
}

// regionFunc is region k: long gp_N_rK(struct gp_scratch *s, long id),
// global.
func (c *compiler) regionFunc(k int) {
	a := &c.a
	c.inCB = true
	c.exStubs = map[[2]int]label{}
	a.cur = -1
	c.regionAt = append(c.regionAt, len(a.ins))
	c.funcStart(c.regionName(k), btf.GlobalFunc, []btf.FuncParam{{Name: "s", Type: c.scratchType()}, {Name: "id", Type: typLong}})
	none := a.newLabel()
	a.jmpImm(asm.JEq, asm.R1, 0, none, false) // never: the callback passes the scratch value
	c.emit(asm.Mov.Reg(rScratch, asm.R1), asm.Mov.Reg(asm.R1, asm.R2))
	lo, hi := c.blockID[c.regionFirst[k]], len(c.blocks)
	if e := c.regionEnd(k); e < c.n {
		hi = c.blockID[e]
	}
	c.dispatch(lo, hi)
	a.bind(none)
	c.emit(asm.Mov.Imm(asm.R0, 1), asm.Return())
	c.lastIsland = len(a.ins)
	c.body(c.regionFirst[k], c.regionEnd(k))
	if e := c.regionEnd(k); e < c.n && c.fallsInto(e) {
		// the code goes on into the next region
		c.a.cur = e - 1
		c.spill()
		c.emit(asm.Mov.Imm(asm.R0, regionFalls), asm.Return())
		c.a.cur = -1
	}
	c.flushStubs()
}

// dispatch jumps to the block whose id r1 holds, for ids lo..hi-1: a
// binary search.
func (c *compiler) dispatch(lo, hi int) {
	a := &c.a
	if hi-lo <= 3 {
		for id := lo; id < hi; id++ {
			a.jmpImm(asm.JEq, asm.R1, int32(id), c.labels[c.blocks[id]], false)
		}
		return
	}
	mid := (lo + hi) / 2
	right := a.newLabel()
	a.jmpImm(asm.JGE, asm.R1, int32(mid), right, false)
	c.dispatch(lo, mid)
	c.emit(asm.Mov.Imm(asm.R0, 1), asm.Return())
	if len(c.a.ins)-c.lastIsland >= islandEvery {
		c.a.island()
		c.lastIsland = len(c.a.ins)
	}
	a.bind(right)
	c.dispatch(mid, hi)
}

// ---- the body

// body emits the code of instructions from..to-1.
func (c *compiler) body(from, to int) {
	for i := from; i < to; i++ {
		if !c.live[i] {
			continue
		}
		c.a.cur = i
		falls := i > from && c.fallsInto(i) || i == 0 && !c.inCB
		if c.fill[i] && falls {
			c.spill()
		}
		c.maybeIsland(falls)
		if c.static {
			c.d = c.depth[i]
		}
		c.a.cur = i
		c.a.bind(c.labels[i])
		if s, ok := c.names[c.pc(i)]; ok {
			c.a.note(fmt.Sprintf("%#04x %s", c.pc(i), s))
		}
		if c.fill[i] {
			c.fillRegs()
		}
		c.insnBody(i)
	}
	c.a.cur = -1
}

// islandEvery is how many eBPF instructions of a body may come before
// the out-of-line code queued so far (later) goes out, in an island the
// code jumps over, where the assembler may also put trampolines for
// jumps that reach farther than 32767 instructions (asm.go, relax).
const islandEvery = 4096

// maybeIsland puts an island here (between two RPN instructions) when the
// last one is islandEvery instructions back.
// falls says whether the code before runs into this place (then it
// jumps over the island).
func (c *compiler) maybeIsland(falls bool) {
	if len(c.a.ins)-c.lastIsland < islandEvery {
		return
	}
	over := c.a.newLabel()
	cur := c.a.cur
	c.a.cur = -1
	if falls {
		c.a.ja(over)
	}
	c.flushStubs()
	c.a.island()
	c.a.bind(over)
	c.lastIsland = len(c.a.ins)
	c.a.cur = cur
}

// jumpTo takes a jump from instruction i to instruction t.
func (c *compiler) jumpTo(i, t int) {
	a := &c.a
	if !c.inCB {
		if c.countJumps {
			a.jmpImm(asm.JEq, rJumps, 0, c.raise(rpn.ExMaxJumps, i), false)
			c.emit(asm.Add.Imm(rJumps, -1))
		}
		if c.fill[t] {
			c.spill()
		}
		a.ja(c.labels[t])
		return
	}
	c.emit(asm.LoadMem(asm.R1, rScratch, offJumps, asm.DWord))
	a.jmpImm(asm.JEq, asm.R1, 0, c.raise(rpn.ExMaxJumps, i), false)
	c.emit(asm.Add.Imm(asm.R1, -1), asm.StoreMem(rScratch, offJumps, asm.R1, asm.DWord))
	c.next(c.blockID[t])
}

// next ends a loop iteration: the next one runs block id.
func (c *compiler) next(id int) {
	c.emit(asm.Mov.Imm(asm.R1, int32(id)))
	c.nextReg(asm.R1)
}

func (c *compiler) nextReg(r asm.Register) {
	c.emit(asm.StoreMem(rScratch, offBlock, r, asm.DWord), asm.StoreMem(rScratch, offLogN, rLogN, asm.DWord))
	if !c.static {
		c.emit(asm.StoreMem(rScratch, offTOS, rTOS, asm.DWord))
	}
	c.emit(asm.Mov.Imm(asm.R0, 0), asm.Return())
}

var condJump = map[rpn.Opcode]asm.JumpOp{
	rpn.OpJz: asm.JEq, rpn.OpJnz: asm.JNE, rpn.OpJlt: asm.JSLT,
	rpn.OpJle: asm.JSLE, rpn.OpJgt: asm.JSGT, rpn.OpJge: asm.JSGE,
}

var notJump = map[asm.JumpOp]asm.JumpOp{
	asm.JEq: asm.JNE, asm.JNE: asm.JEq, asm.JSLT: asm.JSGE,
	asm.JSGE: asm.JSLT, asm.JSLE: asm.JSGT, asm.JSGT: asm.JSLE,
}

// commit ends the program with a record.
func (c *compiler) commit(exit uint8) {
	c.emit(asm.StoreImm(rScratch, hdr(HdrExit), int64(exit), asm.Byte))
	c.stop(statusCommit, c.lCommit)
}

func (c *compiler) insnBody(i int) {
	a := &c.a
	in := c.insn(i)
	r0, r1, r2, r3, r4, r5 := asm.R0, asm.R1, asm.R2, asm.R3, asm.R4, asm.R5
	alu := func(op asm.ALUOp, w32 bool, dst, src asm.Register) {
		if w32 {
			c.emit(op.Reg32(dst, src))
		} else {
			c.emit(op.Reg(dst, src))
		}
	}
	aluI := func(op asm.ALUOp, w32 bool, dst asm.Register, v int32) {
		if w32 {
			c.emit(op.Imm32(dst, v))
		} else {
			c.emit(op.Imm(dst, v))
		}
	}
	switch in.Op {
	case rpn.OpNop:

	case rpn.OpJmp:
		c.jumpTo(i, int(in.C)-c.first)
	case rpn.OpJz, rpn.OpJnz, rpn.OpJlt, rpn.OpJle, rpn.OpJgt, rpn.OpJge:
		op := condJump[in.Op]
		t := int(in.C) - c.first
		c.load(r1, 0, r4)
		if !c.inCB && !c.countJumps {
			if c.fill[t] {
				c.spill()
			}
			a.jmpImm(op, r1, 0, c.labels[t], c.is32)
			break
		}
		skip := a.newLabel()
		a.jmpImm(notJump[op], r1, 0, skip, c.is32)
		c.jumpTo(i, t)
		a.bind(skip)
	case rpn.OpLoop:
		c.load(r1, 0, r4)
		aluI(asm.Sub, c.is32, r1, 1)
		c.store(0, r1, r4)
		t := int(in.C) - c.first
		if !c.inCB && !c.countJumps {
			if c.fill[t] {
				c.spill()
			}
			a.jmpImm(asm.JNE, r1, 0, c.labels[t], false)
			break
		}
		skip := a.newLabel()
		a.jmpImm(asm.JEq, r1, 0, skip, false)
		c.jumpTo(i, t)
		a.bind(skip)
	case rpn.OpCall:
		c.emit(asm.LoadMem(r1, rScratch, offDepth, asm.DWord))
		a.jmpImm(asm.JGE, r1, rpn.MaxCallDepth, c.raise(rpn.ExCallDepth, i), false)
		c.emit(asm.LoadMem(r2, rScratch, offJumps, asm.DWord))
		a.jmpImm(asm.JEq, r2, 0, c.raise(rpn.ExMaxJumps, i), false)
		c.emit(
			asm.Add.Imm(r2, -1),
			asm.StoreMem(rScratch, offJumps, r2, asm.DWord),
			asm.Mov.Reg(r3, r1),
			asm.And.Imm(r3, rpn.MaxCallDepth-1), // never changes it: bounds for Linux 6.1's verifier
			asm.LSh.Imm(r3, 3),
			asm.Add.Reg(r3, rScratch),
			asm.Mov.Imm(r2, int32(c.blockID[i+1])),
			asm.StoreMem(r3, offCalls, r2, asm.DWord),
			asm.Add.Imm(r1, 1),
			asm.StoreMem(rScratch, offDepth, r1, asm.DWord),
		)
		c.next(c.blockID[int(in.C)-c.first])
	case rpn.OpRet:
		c.emit(asm.LoadMem(r1, rScratch, offDepth, asm.DWord))
		bad := c.raise(rpn.ExCallDepth, i)
		a.jmpImm(asm.JEq, r1, 0, bad, false)
		a.jmpImm(asm.JGT, r1, rpn.MaxCallDepth, bad, false) // never: for the verifier
		c.emit(
			asm.Add.Imm(r1, -1),
			asm.StoreMem(rScratch, offDepth, r1, asm.DWord),
			asm.And.Imm(r1, rpn.MaxCallDepth-1), // never changes it: bounds for Linux 6.1's verifier
			asm.LSh.Imm(r1, 3),
			asm.Add.Reg(r1, rScratch),
			asm.LoadMem(r2, r1, offCalls, asm.DWord),
		)
		c.nextReg(r2)

	case rpn.OpExit:
		if in.A == rpn.ExitNone {
			c.stop(statusNone, c.lEnd)
		} else {
			c.commit(in.A)
		}
	case rpn.OpAbort:
		c.stop(statusNone, c.lEnd)
	case rpn.OpEnable, rpn.OpDisable:
		c.switchStore(in)
	case rpn.OpRem:
		c.counters(r1, cntDisabled)
		c.emit(
			asm.Mov.Imm(r2, 1),
			asm.StoreMem(r1, 0, r2, asm.DWord),
			asm.StoreImm(rScratch, hdr(HdrFlags), FlagRem, asm.Byte),
		)
		c.commit(rpn.ExitLog)

	case rpn.OpLogN:
		n := int(in.A)
		c.emit(asm.Mov.Reg(r3, rScratch), asm.Add.Reg(r3, rLogN))
		for j := 0; j < n; j++ {
			c.load(r1, n-1-j, r4)
			c.emit(asm.StoreMem(r3, int16(offLog+j*c.w), r1, c.size()))
		}
		c.emit(asm.Add.Imm(rLogN, int32(n*c.w)))
		c.clampLog(true)
		c.adjust(-n)
	case rpn.OpLogStr:
		c.logStr(i)
	case rpn.OpLogMrf:
		if fd := c.ctxLog[i]; fd != nil {
			c.logCtx(fd, int(c.insn(i-2).Imm))
		} else {
			c.logMrf(i)
		}
	case rpn.OpLogUStack, rpn.OpLogKStack:
		c.logStack(in.Op == rpn.OpLogUStack, int(in.A))
	case rpn.OpLogLV, rpn.OpLogGV:
		n := int(in.C)
		c.varsBase(r2, in.Op == rpn.OpLogGV, int(in.B)*8)
		c.emit(asm.Mov.Reg(r3, rScratch), asm.Add.Reg(r3, rLogN))
		for j := 0; j < n; j++ {
			c.emit(
				asm.LoadMem(r1, r2, int16(j*8), asm.DWord),
				asm.StoreMem(r3, int16(offLog+j*c.w), r1, c.size()),
			)
		}
		c.emit(asm.Add.Imm(rLogN, int32(n*c.w)))
		c.clampLog(true)
	case rpn.OpSetMajI:
		c.emit(asm.StoreImm(rScratch, hdr(HdrMajor), int64(in.B), asm.Half))
	case rpn.OpSetMinI:
		c.emit(asm.StoreImm(rScratch, hdr(HdrMinor), int64(in.B), asm.Half))
	case rpn.OpSetMaj, rpn.OpSetMin:
		c.load(r1, 0, r4)
		c.adjust(-1)
		a.jmpImm(asm.JGT, r1, 0xffff, c.raise(rpn.ExInvalidOperand, i), false)
		off := hdr(HdrMajor)
		if in.Op == rpn.OpSetMin {
			off = hdr(HdrMinor)
		}
		c.emit(asm.StoreMem(rScratch, off, r1, asm.Half))
	case rpn.OpPushLP:
		c.push(rLogN)
	case rpn.OpPopLP:
		c.load(r1, 0, r4)
		c.adjust(-1)
		a.jmpReg(asm.JGT, r1, rLogN, c.raise(rpn.ExInvalidOperand, i))
		c.emit(asm.Mov.Reg(rLogN, r1))
		c.clampLog(false)

	case rpn.OpPushLVI, rpn.OpPushGVI:
		c.varsBase(r2, in.Op == rpn.OpPushGVI, int(in.B)*8)
		c.emit(asm.LoadMem(r1, r2, 0, asm.DWord))
		c.push(r1)
	case rpn.OpPopLVI, rpn.OpPopGVI, rpn.OpMoveLVI, rpn.OpMoveGVI:
		c.load(r1, 0, r4)
		c.varsBase(r2, in.Op == rpn.OpPopGVI || in.Op == rpn.OpMoveGVI, int(in.B)*8)
		c.emit(asm.StoreMem(r2, 0, r1, asm.DWord))
		if in.Op == rpn.OpPopLVI || in.Op == rpn.OpPopGVI {
			c.adjust(-1)
		}
	case rpn.OpIncLVI, rpn.OpIncGVI, rpn.OpDecLVI, rpn.OpDecGVI:
		c.varsBase(r2, in.Op == rpn.OpIncGVI || in.Op == rpn.OpDecGVI, int(in.B)*8)
		by := int32(1)
		if in.Op == rpn.OpDecLVI || in.Op == rpn.OpDecGVI {
			by = -1
		}
		c.incVar(r2, by)
	case rpn.OpPushLV, rpn.OpPopLV, rpn.OpMoveLV, rpn.OpIncLV, rpn.OpDecLV,
		rpn.OpPushGV, rpn.OpPopGV, rpn.OpMoveGV, rpn.OpIncGV, rpn.OpDecGV:
		c.indexedVar(i, in.Op)

	case rpn.OpAdd, rpn.OpSub, rpn.OpMul:
		op := map[rpn.Opcode]asm.ALUOp{rpn.OpAdd: asm.Add, rpn.OpSub: asm.Sub, rpn.OpMul: asm.Mul}[in.Op]
		c.load(r1, 0, r4)
		c.load(r2, 1, r5)
		alu(op, c.is32, r2, r1)
		c.store(1, r2, r5)
		c.adjust(-1)
	case rpn.OpAnd, rpn.OpOr, rpn.OpXor:
		op := map[rpn.Opcode]asm.ALUOp{rpn.OpAnd: asm.And, rpn.OpOr: asm.Or, rpn.OpXor: asm.Xor}[in.Op]
		c.load(r1, 0, r4)
		c.load(r2, 1, r5)
		alu(op, false, r2, r1) // never masked, as the machine
		c.store(1, r2, r5)
		c.adjust(-1)
	case rpn.OpDiv, rpn.OpIDiv:
		c.load(r1, 0, r4)
		c.load(r2, 1, r5)
		if in.Op == rpn.OpIDiv && c.is32 {
			c.emit(asm.LSh.Imm(r1, 32), asm.ArSh.Imm(r1, 32), asm.LSh.Imm(r2, 32), asm.ArSh.Imm(r2, 32))
		}
		a.jmpImm(asm.JEq, r1, 0, c.raise(rpn.ExDivideByZero, i), false)
		if in.Op == rpn.OpIDiv {
			c.sdiv()
			c.maskW(r2)
			c.maskW(r3)
		} else {
			c.emit(asm.Mov.Reg(r3, r2), asm.Div.Reg(r2, r1), asm.Mod.Reg(r3, r1))
		}
		c.store(0, r2, r4)
		c.store(1, r3, r5)
	case rpn.OpNot:
		c.load(r1, 0, r4)
		aluI(asm.Xor, c.is32, r1, -1)
		c.store(0, r1, r4)
	case rpn.OpNeg:
		c.load(r1, 0, r4)
		if c.is32 {
			c.emit(asm.Neg.Imm32(r1, 0))
		} else {
			c.emit(asm.Neg.Imm(r1, 0))
		}
		c.store(0, r1, r4)
	case rpn.OpShlI, rpn.OpShrI, rpn.OpSarI, rpn.OpRolI, rpn.OpRorI:
		c.load(r1, 0, r4)
		c.shiftImm(in.Op, r1, int32(in.A))
		c.store(0, r1, r4)
	case rpn.OpShl, rpn.OpShr, rpn.OpSar, rpn.OpRol, rpn.OpRor:
		c.load(r2, 0, r4) // the count
		c.load(r1, 1, r5)
		c.shiftReg(in.Op, r1, r2)
		c.store(1, r1, r5)
		c.adjust(-1)

	case rpn.OpVfyR:
		c.load(r3, 0, r4)
		c.emit(asm.Mov.Reg(r1, asm.R10), asm.Add.Imm(r1, fpByte), asm.Mov.Imm(r2, 1))
		c.probeRead(false)
		ok := a.newLabel()
		c.emit(asm.Mov.Imm(r1, 0))
		a.jmpImm(asm.JEq, r0, 0, ok, false)
		c.emit(asm.Mov.Imm(r1, 1))
		a.bind(ok)
		c.store(0, r1, r4)

	case rpn.OpPop:
		c.adjust(-1)
	case rpn.OpDup:
		c.load(r1, 0, r4)
		c.push(r1)
	case rpn.OpXchg:
		c.load(r1, 0, r4)
		c.load(r2, 1, r5)
		c.store(0, r2, r4)
		c.store(1, r1, r5)
	case rpn.OpRos:
		c.adjust(-int(in.A))

	case rpn.OpPushR:
		r := rpn.Reg(in.B)
		c.emit(asm.LoadMem(r1, rScratch, int16(offRegs+int(r.Canonical())*8), asm.DWord))
		if r.Is32() {
			c.emit(asm.Mov.Reg32(r1, r1))
		}
		c.maskW(r1)
		c.push(r1)
	case rpn.OpPushField:
		c.emit(asm.LoadMem(r1, rScratch, int16(offFields+c.fieldAt[in.B]*8), asm.DWord))
		c.maskW(r1)
		c.push(r1)
	case rpn.OpPushIV:
		c.emit(asm.LoadMem(r1, rScratch, int16(offIV+8*int(in.A)), asm.DWord))
		c.push(r1)
	case rpn.OpPopIV:
		c.load(r1, 0, asm.R5)
		c.emit(asm.StoreMem(rScratch, int16(offIV+8*int(in.A)), r1, asm.DWord))
		c.adjust(-1)
	case rpn.OpPushU:
		r := rpn.Reg(in.B)
		c.emit(asm.FnGetCurrentTaskBtf.Call(), asm.Mov.Reg(r1, r0), asm.FnTaskPtRegs.Call())
		c.emit(asm.LoadMem(r1, r0, ptRegs[r.Canonical()], asm.DWord))
		if r.Is32() {
			c.emit(asm.Mov.Reg32(r1, r1))
		}
		c.maskW(r1)
		c.push(r1)

	case rpn.OpPushD:
		c.emit(movImm64(r1, in.Imm))
		if f := c.biasFactor(i); f != 0 {
			// an address in the module: moved by this process's bias
			c.emit(asm.LoadMem(r2, rScratch, offBias, asm.DWord))
			if f != 1 {
				c.emit(movImm64(r3, f), asm.Mul.Reg(r2, r3))
			}
			c.emit(asm.Add.Reg(r1, r2))
			c.maskW(r1)
		}
		c.push(r1)
	case rpn.OpPushMrf:
		c.load(r3, 0, r4)
		c.emit(asm.StoreMem(asm.R10, fpAddr, r3, asm.DWord))
		c.slotPtr(0, r1)
		if in.A < 8 {
			c.emit(asm.Mov.Imm(r2, 0), asm.StoreMem(r1, 0, r2, asm.DWord))
		}
		c.emit(asm.Mov.Imm(r2, int32(in.A)))
		c.probeRead(false)
		a.jmpImm(asm.JNE, r0, 0, c.raiseAddr(i), false)

	case rpn.OpPushArg:
		arg := c.o.Args[in.A-1]
		switch arg.Kind {
		case ArgConst:
			c.emit(movImm64(r1, uint64(arg.Value)))
		case ArgReg:
			c.emit(asm.LoadMem(r1, rScratch, int16(offRegs+int(arg.Reg.Canonical())*8), asm.DWord))
			extend(c, r1, arg.Size, arg.Signed)
		case ArgMem:
			// the address, then push mrf,size of it
			c.emit(asm.LoadMem(r3, rScratch, int16(offRegs+int(arg.Reg.Canonical())*8), asm.DWord))
			c.emit(movImm64(r2, uint64(arg.Value)), asm.Add.Reg(r3, r2))
			c.push(r3)
			c.emit(asm.StoreMem(asm.R10, fpAddr, r3, asm.DWord))
			c.slotPtr(0, r1)
			c.emit(asm.Mov.Imm(r2, 0), asm.StoreMem(r1, 0, r2, asm.DWord))
			c.emit(asm.Mov.Imm(r2, int32(arg.Size)))
			c.probeRead(false)
			a.jmpImm(asm.JNE, r0, 0, c.raiseAddr(i), false)
			c.load(r1, 0, r4)
			extend(c, r1, arg.Size, arg.Signed)
			c.maskW(r1)
			c.store(0, r1, r4)
		}
		if arg.Kind != ArgMem {
			c.maskW(r1)
			c.push(r1)
		}

	case rpn.OpPushPID:
		c.emit(asm.LoadMem(r0, rScratch, hdr(HdrPID), asm.Word))
		c.push(r0)
	case rpn.OpPushTID:
		c.emit(asm.LoadMem(r0, rScratch, hdr(HdrTID), asm.Word))
		c.push(r0)
	case rpn.OpPushProcID:
		c.emit(asm.FnGetSmpProcessorId.Call())
		c.push(r0)
	case rpn.OpPushTask:
		c.emit(asm.FnGetCurrentTask.Call())
		c.maskW(r0)
		c.push(r0)
	case rpn.OpPushTS:
		c.emit(asm.LoadMem(r1, rScratch, hdr(HdrTS), asm.DWord))
		c.maskW(r1)
		c.push(r1)

	default:
		// refused by check
		panic(fmt.Sprintf("bpf: %v not handled", in.Op))
	}
}

// sdiv: r2 = r2 / r1 and r3 = r2 % r1, signed, truncated (Go's: MinInt64
// / -1 is MinInt64, remainder 0), r1 not 0; r0, r4, r5 clobbered. Unsigned
// division of the magnitudes, the quotient's sign set after, the
// remainder y - q*x: BPF's own sdiv and smod are Linux 6.6's (ISA v4), and
// Linux 6.1 (the lab's) refuses them.
func (c *compiler) sdiv() {
	a := &c.a
	r0, r1, r2, r3, r4, r5 := asm.R0, asm.R1, asm.R2, asm.R3, asm.R4, asm.R5
	pos1, pos2, pos3 := a.newLabel(), a.newLabel(), a.newLabel()
	c.emit(asm.Mov.Reg(r3, r2), asm.Mov.Reg(r4, r1))
	a.jmpImm(asm.JSGE, r3, 0, pos1, false)
	c.emit(asm.Neg.Imm(r3, 0)) // |MinInt64| is 1<<63 unsigned
	a.bind(pos1)
	a.jmpImm(asm.JSGE, r4, 0, pos2, false)
	c.emit(asm.Neg.Imm(r4, 0))
	a.bind(pos2)
	c.emit(asm.Div.Reg(r3, r4), asm.Mov.Reg(r0, r2), asm.Xor.Reg(r0, r1))
	a.jmpImm(asm.JSGE, r0, 0, pos3, false)
	c.emit(asm.Neg.Imm(r3, 0))
	a.bind(pos3)
	c.emit(
		asm.Mov.Reg(r0, r3), asm.Mul.Reg(r0, r1), // q*x
		asm.Mov.Reg(r5, r2), asm.Sub.Reg(r5, r0), // y - q*x
		asm.Mov.Reg(r2, r3), asm.Mov.Reg(r3, r5),
	)
}

// size is the eBPF size of a word.
func (c *compiler) size() asm.Size {
	if c.is32 {
		return asm.Word
	}
	return asm.DWord
}

// incVar adds by to the variable at r2, atomically. A 32-bit module's
// variable is (v+by) & 0xffffffff: an atomic add to its low half, then
// its high half cleared (not atomic with the add: the high half is only
// ever set by a 64-bit module sharing the gv).
func (c *compiler) incVar(base asm.Register, by int32) {
	c.emit(asm.Mov.Imm(asm.R1, by))
	if !c.is32 {
		c.emit(atomicAdd(base, asm.R1, asm.DWord, 0))
		return
	}
	c.emit(
		atomicAdd(base, asm.R1, asm.Word, 0),
		asm.StoreImm(base, 4, 0, asm.Word),
	)
}

// indexedVar: push/pop/move/inc/dec lv and gv with the index on the stack.
func (c *compiler) indexedVar(i int, op rpn.Opcode) {
	a := &c.a
	gv := op >= rpn.OpPushGV
	n := c.mod.Vars
	if gv {
		n = c.mod.GVars
		op -= rpn.OpPushGV - rpn.OpPushLV
	}
	r1, r2, r3, r4, r5 := asm.R1, asm.R2, asm.R3, asm.R4, asm.R5
	bad := c.raise(rpn.ExInvalidOperand, i)
	// r3 = &vars[r3], after the check
	addr := func() {
		a.jmpImm(asm.JGE, r3, int32(n), bad, false)
		c.emit(asm.LSh.Imm(r3, 3))
		c.varsBase(r2, gv, 0)
		c.emit(asm.Add.Reg(r3, r2))
	}
	switch op {
	case rpn.OpPushLV: // i PUSH LV lv[i]
		c.load(r3, 0, r4)
		addr()
		c.emit(asm.LoadMem(r1, r3, 0, asm.DWord))
		c.store(0, r1, r4)
	case rpn.OpPopLV: // i x POP LV
		c.load(r3, 1, r5)
		addr()
		c.load(r1, 0, r4)
		c.emit(asm.StoreMem(r3, 0, r1, asm.DWord))
		c.adjust(-2)
	case rpn.OpMoveLV: // x i MOVE LV x
		c.load(r3, 0, r4)
		addr()
		c.adjust(-1)
		c.load(r1, 0, r4)
		c.emit(asm.StoreMem(r3, 0, r1, asm.DWord))
	case rpn.OpIncLV, rpn.OpDecLV: // i INC LV
		c.load(r3, 0, r4)
		addr()
		c.adjust(-1)
		by := int32(1)
		if op == rpn.OpDecLV {
			by = -1
		}
		c.incVar(r3, by)
	}
}

// shiftImm: x SHL n etc., n below the word width (the RPN verifier's
// rule). 32-bit modules keep the machine's masks: shr is the whole word's.
func (c *compiler) shiftImm(op rpn.Opcode, x asm.Register, n int32) {
	t := asm.R2
	if !c.is32 {
		switch op {
		case rpn.OpShlI:
			c.emit(asm.LSh.Imm(x, n))
		case rpn.OpShrI:
			c.emit(asm.RSh.Imm(x, n))
		case rpn.OpSarI:
			c.emit(asm.ArSh.Imm(x, n))
		case rpn.OpRolI, rpn.OpRorI:
			if n == 0 {
				return
			}
			l, r := n, 64-n
			if op == rpn.OpRorI {
				l, r = r, l
			}
			c.emit(asm.Mov.Reg(t, x), asm.LSh.Imm(x, l), asm.RSh.Imm(t, r), asm.Or.Reg(x, t))
		}
		return
	}
	switch op {
	case rpn.OpShlI:
		c.emit(asm.LSh.Imm32(x, n))
	case rpn.OpShrI:
		c.emit(asm.RSh.Imm(x, n))
	case rpn.OpSarI:
		c.emit(asm.ArSh.Imm32(x, n))
	case rpn.OpRolI, rpn.OpRorI:
		if n == 0 {
			c.emit(asm.Mov.Reg32(x, x))
			return
		}
		l, r := n, 32-n
		if op == rpn.OpRorI {
			l, r = r, l
		}
		c.emit(asm.Mov.Reg32(t, x), asm.LSh.Imm32(x, l), asm.RSh.Imm32(t, r), asm.Or.Reg32(x, t))
	}
}

// shiftReg: y n SHL etc. with the count in n (clobbered), y in x. Counts at
// or beyond the width give 0 for shl and shr and the sign for sar;
// rotations count modulo the width.
func (c *compiler) shiftReg(op rpn.Opcode, x, n asm.Register) {
	a := &c.a
	w32 := c.is32
	width := int32(64)
	if w32 {
		width = 32
	}
	t := asm.R3
	switch op {
	case rpn.OpShl, rpn.OpShr:
		big, done := a.newLabel(), a.newLabel()
		a.jmpImm(asm.JGE, n, width, big, false)
		switch {
		case op == rpn.OpShr:
			c.emit(asm.RSh.Reg(x, n)) // whole word, as the machine
		case w32:
			c.emit(asm.LSh.Reg32(x, n))
		default:
			c.emit(asm.LSh.Reg(x, n))
		}
		a.ja(done)
		a.bind(big)
		c.emit(asm.Mov.Imm(x, 0))
		a.bind(done)
	case rpn.OpSar:
		ok := a.newLabel()
		a.jmpImm(asm.JLT, n, width, ok, false)
		c.emit(asm.Mov.Imm(n, width-1))
		a.bind(ok)
		if w32 {
			c.emit(asm.ArSh.Reg32(x, n))
		} else {
			c.emit(asm.ArSh.Reg(x, n))
		}
	case rpn.OpRol, rpn.OpRor:
		// (x << r) | (x >> ((width-r) & (width-1))): r = 0 gives x | x
		first, second := asm.LSh, asm.RSh
		if op == rpn.OpRor {
			first, second = second, first
		}
		c.emit(asm.And.Imm(n, width-1), asm.Mov.Imm(t, width), asm.Sub.Reg(t, n), asm.And.Imm(t, width-1))
		if w32 {
			c.emit(asm.Mov.Reg32(asm.R4, x), first.Reg32(x, n), second.Reg32(asm.R4, t), asm.Or.Reg32(x, asm.R4))
		} else {
			c.emit(asm.Mov.Reg(asm.R4, x), first.Reg(x, n), second.Reg(asm.R4, t), asm.Or.Reg(x, asm.R4))
		}
	}
}

// logMrf: len addr LOG MRF, len raw bytes, cut to the room left.
func (c *compiler) logMrf(i int) {
	a := &c.a
	r0, r1, r2, r3 := asm.R0, asm.R1, asm.R2, asm.R3
	c.load(r3, 0, asm.R4)
	c.load(r2, 1, asm.R5)
	c.adjust(-2)
	fits, done := a.newLabel(), a.newLabel()
	c.emit(asm.Mov.Imm(r1, c.logmax), asm.Sub.Reg(r1, rLogN)) // room
	a.jmpReg(asm.JLE, r2, r1, fits)
	c.emit(asm.Mov.Reg(r2, r1), asm.StoreImm(rScratch, hdr(HdrTruncated), 1, asm.Byte))
	a.bind(fits)
	a.jmpImm(asm.JEq, r2, 0, done, false)
	a.jmpImm(asm.JGT, r2, c.logmax, done, false) // never: for the verifier
	c.emit(
		asm.StoreMem(asm.R10, fpAddr, r3, asm.DWord),
		asm.StoreMem(asm.R10, fpN, r2, asm.DWord),
		asm.Mov.Reg(r1, rScratch),
		asm.Add.Reg(r1, rLogN),
		asm.Add.Imm(r1, offLog),
	)
	c.probeRead(false)
	a.jmpImm(asm.JNE, r0, 0, c.raiseAddr(i), false)
	c.emit(asm.LoadMem(r2, asm.R10, fpN, asm.DWord), asm.Add.Reg(rLogN, r2))
	c.clampLog(false)
	a.bind(done)
	c.settleLog()
}

// settleLog ends an instruction whose paths leave the log length in
// different ranges (log mrf, log str: the length read, cut, nothing):
// stored and loaded back, it is one unknown bounded by logmax on all of
// them, so that the verifier's paths meet again right after (doc.go,
// "Verification cost") instead of going on apart through the
// instructions after.
func (c *compiler) settleLog() {
	c.emit(asm.StoreMem(rScratch, offLogN, rLogN, asm.DWord), asm.LoadMem(rLogN, rScratch, offLogN, asm.DWord))
	c.clampLog(false)
}

// logStr: len addr LOG STR: the bytes up to the NUL, at most len, cut to
// the room left (truncated when the string went on: the byte after the
// room is read to know, as the machine does). bpf_probe_read_*_str with
// room for the NUL does the copy.
func (c *compiler) logStr(i int) {
	a := &c.a
	r0, r1, r2, r3 := asm.R0, asm.R1, asm.R2, asm.R3
	c.load(r3, 0, asm.R4)
	c.load(r2, 1, asm.R5)
	c.adjust(-2)
	done, full, next, trunc, l1 := a.newLabel(), a.newLabel(), a.newLabel(), a.newLabel(), a.newLabel()
	a.jmpImm(asm.JEq, r2, 0, done, false)
	c.emit(
		asm.StoreMem(asm.R10, fpAddr, r3, asm.DWord),
		asm.Mov.Imm(r1, c.logmax),
		asm.Sub.Reg(r1, rLogN), // room
		asm.Mov.Imm(asm.R4, 0),
	)
	a.jmpReg(asm.JLE, r2, r1, l1)
	c.emit(asm.Mov.Reg(r2, r1), asm.Mov.Imm(asm.R4, 1))
	a.bind(l1)
	c.emit(asm.StoreMem(asm.R10, fpCut, asm.R4, asm.DWord))
	a.jmpImm(asm.JEq, r2, 0, full, false)
	a.jmpImm(asm.JGT, r2, c.logmax, done, false) // never: for the verifier
	c.emit(
		asm.StoreMem(asm.R10, fpN, r2, asm.DWord),
		asm.Add.Imm(r2, 1),
		asm.Mov.Reg(r1, rScratch),
		asm.Add.Reg(r1, rLogN),
		asm.Add.Imm(r1, offLog),
	)
	c.probeRead(true)
	fault := c.later(func() {
		// The helper read n+1 bytes (to find the NUL): the n bytes the
		// machine would copy may all be readable, and only the one after
		// them not (which the machine reads only to know whether the
		// string was cut). No NUL came before the fault: if the n bytes
		// read, they are the log's.
		c.emit(
			asm.Mov.Reg(r1, rScratch), asm.Add.Reg(r1, rLogN), asm.Add.Imm(r1, offLog),
			asm.LoadMem(r2, asm.R10, fpN, asm.DWord),
			asm.LoadMem(r3, asm.R10, fpAddr, asm.DWord),
		)
		a.jmpImm(asm.JGT, r2, c.logmax, done, false) // never: for the verifier
		c.probeRead(false)
		bad := a.newLabel()
		a.jmpImm(asm.JNE, r0, 0, bad, false)
		c.emit(asm.LoadMem(r2, asm.R10, fpN, asm.DWord), asm.Add.Reg(rLogN, r2))
		c.clampLog(false)
		c.emit(asm.LoadMem(r1, asm.R10, fpCut, asm.DWord))
		a.jmpImm(asm.JEq, r1, 0, done, false)
		a.ja(trunc)
		// which byte faulted? the first if it is unreadable, else (the
		// string crossing into an unreadable page) the next page's first
		a.bind(bad)
		c.emit(
			asm.LoadMem(r3, asm.R10, fpAddr, asm.DWord),
			asm.Mov.Reg(r1, asm.R10), asm.Add.Imm(r1, fpByte), asm.Mov.Imm(r2, 1),
		)
		c.probeRead(false)
		c.emit(asm.LoadMem(r1, asm.R10, fpAddr, asm.DWord))
		at := a.newLabel()
		a.jmpImm(asm.JNE, r0, 0, at, false)
		c.emit(asm.Or.Imm(r1, 4095), asm.Add.Imm(r1, 1))
		a.bind(at)
		c.raiseTail(rpn.ExInvalidAddress, i)
	})
	a.jmpImm(asm.JSLT, r0, 0, fault, false)
	pos := a.newLabel()
	c.emit(asm.Add.Imm(r0, -1)) // the NUL is not logged
	a.jmpImm(asm.JSGE, r0, 0, pos, false)
	c.emit(asm.Mov.Imm(r0, 0))
	a.bind(pos)
	c.emit(asm.LoadMem(r2, asm.R10, fpN, asm.DWord))
	le := a.newLabel()
	a.jmpReg(asm.JLE, r0, r2, le)
	c.emit(asm.Mov.Reg(r0, r2)) // never
	a.bind(le)
	c.emit(asm.Add.Reg(rLogN, r0))
	c.clampLog(false)
	a.jmpReg(asm.JNE, r0, r2, done) // the string ended
	c.emit(asm.LoadMem(r1, asm.R10, fpCut, asm.DWord))
	a.jmpImm(asm.JEq, r1, 0, done, false) // len reached, not the log's end
	c.emit(asm.LoadMem(r3, asm.R10, fpAddr, asm.DWord), asm.Add.Reg(r3, r2))
	a.ja(next)
	a.bind(full)
	c.emit(asm.LoadMem(r3, asm.R10, fpAddr, asm.DWord))
	a.bind(next)
	// the log is full with bytes left: does the string end here?
	c.emit(asm.Mov.Reg(r1, asm.R10), asm.Add.Imm(r1, fpByte), asm.Mov.Imm(r2, 1))
	c.probeRead(false)
	a.jmpImm(asm.JNE, r0, 0, trunc, false)
	c.emit(asm.LoadMem(r1, asm.R10, fpByte, asm.Byte))
	a.jmpImm(asm.JEq, r1, 0, done, false)
	a.bind(trunc)
	c.emit(asm.StoreImm(rScratch, hdr(HdrTruncated), 1, asm.Byte))
	a.bind(done)
	c.settleLog()
}

// The kernel's verifier limits (BPF_COMPLEXITY_LIMIT_INSNS, Linux 5.2
// on): a program of at most a million instructions (for a loader with
// CAP_BPF; 4096 without), and at most a million instructions processed
// checking it ("BPF program is too large. Processed 1000001 insn").
const (
	maxProgInsns  = 1_000_000
	maxProcessed  = MaxProcessed
	estimateFixed = 2000 // the callback's dispatch, the loop's iterations (twice from Linux 6.7)
)

// verifierWeight is how many times at most the verifier processes an
// eBPF instruction of an RPN instruction's code (op; glue: the
// prologue, the dispatch, the joins' loads): the paths through the code
// of one instruction are few and meet again at its end (doc.go,
// "Verification cost"); the figures are those measured on Linux 6.1 and
// 6.18 with a margin (TestVerifierCost, TestBranchy).
func verifierWeight(op rpn.Opcode, glue bool) int {
	switch {
	case glue:
		return 3
	case op == rpn.OpLogStr:
		return 4
	case op == rpn.OpLogMrf:
		return 3
	case op.IsJump(), op == rpn.OpRet, op == rpn.OpIDiv, op == rpn.OpDiv, op == rpn.OpPushMrf, op == rpn.OpVfyR:
		return 3
	}
	return 2
}

// estimate sets Estimate, and where the estimate goes past the
// verifier's budget.
func (c *Compiled) estimate(tails int) {
	sum := estimateFixed + tails
	c.overAt = -1
	for r, i := range c.rpn {
		if i < 0 {
			sum += verifierWeight(0, true)
		} else {
			sum += verifierWeight(c.p.Insn(i).Op, false)
		}
		if sum > maxProcessed && c.overAt < 0 {
			c.overAt = r
		}
	}
	c.est = sum
}

// MaxProcessed is the most instructions the kernel's verifier processes
// checking a program (BPF_COMPLEXITY_LIMIT_INSNS).
const MaxProcessed = 1_000_000

// Instructions is the size of the program in eBPF instructions (8-byte
// slots: a 64-bit immediate load takes two).
func (c *Compiled) Instructions() int { return len(c.rpn) }

// Estimate is an upper bound of the instructions the kernel's verifier
// processes checking the program ("processed N insns"), which it stops
// at a million.
func (c *Compiled) Estimate() int { return c.est }

// Budget refuses, before anything is loaded, a program past the kernel's
// verifier limits: more than a million eBPF instructions, or more than
// a million the verifier would process (Estimate). The error names the
// RPN instruction where the program goes past (TooLarge).
func (c *Compiled) Budget() error {
	at := func(raw int) (uint32, bool, string) {
		for ; raw >= 0; raw-- {
			if i := c.rpn[raw]; i >= 0 {
				pc := c.p.PC(i)
				return pc, true, position(c.p.Module(), pc)
			}
		}
		return 0, false, ""
	}
	if n := len(c.rpn); n > maxProgInsns {
		pc, has, where := at(maxProgInsns)
		return &TooLarge{Probe: c.pi, PC: pc, HasPC: has, Where: where, Need: n, Max: maxProgInsns,
			Limit:  "BPF_COMPLEXITY_LIMIT_INSNS: the most instructions in a program",
			Reason: fmt.Sprintf("its eBPF program would be %d instructions, past the limit from this instruction on", n)}
	}
	if c.est > maxProcessed {
		pc, has, where := at(c.overAt)
		return &TooLarge{Probe: c.pi, PC: pc, HasPC: has, Where: where, Need: c.est, Max: maxProcessed,
			Limit:  "BPF_COMPLEXITY_LIMIT_INSNS: the most instructions the verifier processes",
			Reason: fmt.Sprintf("its eBPF program (%d instructions) may cost the kernel's verifier up to %d instructions processed, past the limit from this instruction on", len(c.rpn), c.est)}
	}
	return nil
}

// biasFactor is the bias factor of the probe's instruction i's push d
// immediate when it is one of Options.Biased, else 0.
func (c *compiler) biasFactor(i int) uint64 {
	if len(c.o.Biased) == 0 {
		return 0
	}
	i += c.first
	pc := c.p.PC(i)
	end := uint32(len(c.mod.Code))
	if i+1 < c.p.NumInsns() {
		end = c.p.PC(i + 1)
	}
	for off, f := range c.o.Biased {
		if off > pc && off < end {
			return f
		}
	}
	return 0
}

// ArgKind is where a usdt argument is (package usdt).
type ArgKind = usdt.ArgKind

const (
	ArgConst = usdt.ArgConst // a constant: Value
	ArgReg   = usdt.ArgReg   // a register: Reg
	ArgMem   = usdt.ArgMem   // memory at Reg + Value
)

// USDTArg is one argument of a usdt probe as its note (sys/sdt.h)
// describes it (package usdt).
type USDTArg = usdt.Arg

// extend zero- or sign-extends the low size bytes of r to 64 bits.
func extend(c *compiler, r asm.Register, size int, signed bool) {
	if size >= 8 || size <= 0 {
		return
	}
	sh := int32(64 - 8*size)
	c.emit(asm.LSh.Imm(r, sh))
	if signed {
		c.emit(asm.ArSh.Imm(r, sh))
	} else {
		c.emit(asm.RSh.Imm(r, sh))
	}
}
