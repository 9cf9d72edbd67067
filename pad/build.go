package pad

import (
	"encoding/binary"
	"fmt"

	"github.com/gprobes/gprobes/jit"
	"github.com/gprobes/gprobes/x86"
)

// A pad, from its first byte (the probe's jump lands there). R is the
// thread's rsp at the probe.
//
//	entry:  lea -128(%rsp),%rsp; pushfq; push rax, rcx, rdx
//	                                the only bytes of the thread's stack the
//	                                pad writes: 4 words below its red zone
//	        the tracer gone (the liveness word): pop, copy A, no probe
//	        take a pad stack: from the slot R hashes to, the first whose
//	        owner word goes from 0 to R (lock cmpxchg); none free: count the
//	        hit missed, restore, run the covered instructions (copy C)
//	        xchg: rsp = the slot's top; the frame from the saved words and
//	        the registers (rbp = the frame, jit's contract); the scratch
//	        areas below it; rdtsc; the thread id
//	        for each probe i: rbx = scratch_i; call prog_i; an exception
//	                          commits now, a record to commit sets pending
//	        nothing pending: the flags, rbp, rax and the slot's address go
//	        to the thread's stack below its red zone (the same 4 words), the
//	        other registers from the frame, rsp = R - 160, the slot freed
//	        (a store of 0: after the last read of it);
//	        cmpb $0,held(%rip); Checked: jne toC     a signal held
//	Unwind: pop %rbp; pop %rax; popfq; lea 128(%rsp),%rsp
//	copyA:  the covered instructions but a last one that transfers control,
//	        relocated, with the thread's own registers and rsp (no flag
//	        saved or checked after them: the fast path)
//	Final:  the last covered instruction if it transfers control, else
//	        jmp back to the probe address + covered length
//	toC:    pop %rbp; pop %rax; popfq; lea 128(%rsp),%rsp
//	copyC:  the covered instructions again; lea -128(%rsp),%rsp; pushfq
//	cont:   cmpb $0, held(%rip)       a signal gprobes holds for a thread
//	        jne trap                  inside a pad: stop for gprobes
//	Popf:   popfq
//	Lea:    lea 128(%rsp),%rsp
//	Back:   jmp Final
//	trap:   push rax, rcx, r11; the tracer still there (the liveness
//	        word): getpid, at Sys (the thread gprobes holds a signal for
//	        stops at its exit); pop; jmp Popf
//	pend:   a record pending: the registers back as above, the slot kept
//	copyB:  the covered instructions a third time
//	post:   lea -128(%rsp),%rsp; pushfq; push rax, rcx, rdx; the slot found
//	        again (owner R: the covered instructions moved rsp by a known
//	        delta); on the slot's stack, below its scratch areas, save what
//	        the commit uses, commit each pending record to the ring,
//	        restore, back to the thread's stack, free the slot, pop; jmp cont
//	ring:   the commit routine (r12d = the record's site, rbx = scratch)
//	progs:  the compiled programs
//	        the pool's first slot top and end, for the rip-relative loads
//
// gprobes moves a thread it holds a signal for from copy A to the same
// instruction of copy C (Pad.Holding), and one that faults in copy B to
// copy A (Pad.Pending: the hit's records dropped, its pad stack freed).
//
// A pad's state (the frame, the scratch areas, the programs' stack) is on
// a pad stack of its own, one of PoolSlots slots of SlotStride bytes in a
// private mapping of the process (a fork child has its own copy): nothing
// per thread to allocate or find, no system call, any runtime (the key is
// the rsp, not a thread id). A slot's top 64 bytes are its owner word; its
// stack is below. A signal that arrives while a thread is inside a pad is
// held by gprobes (docs/engine.md), so no handler runs on a pad stack.
const (
	redZone   = 128
	frameSize = 18 * 8
	// saved is the bytes the pad pushes below the red zone: flags, rax,
	// rcx, rdx (entry and post) or flags, rax, rbp, the slot (leaving)
	saved = 4 * 8
	// StackBelow is the most the pad writes below a thread's rsp: its
	// red zone and the 4 words.
	StackBelow = redZone + saved
	// MaxDrop bounds how far the covered instructions may move rsp.
	MaxDrop = 4096

	// PoolSlots pad stacks of SlotStride bytes: SlotUse of each for the
	// pad (the frame, the scratch areas, the programs' stack), the rest
	// a margin that is never touched unless a handler runs there (the
	// tracer gone, see docs/engine.md)
	PoolSlots  = 256
	poolBits   = 8
	SlotStride = 64 << 10
	slotShift  = 16
	SlotUse    = 32 << 10
	// PoolSize is the mapping the pool takes in the process.
	PoolSize = PoolSlots * SlotStride
	// slotTop is where a slot's owner word is, from the slot's start
	slotTop = SlotStride - 64
)

// Probe is one compiled probe at the pad's address.
type Probe struct {
	Code   *jit.Code
	Site   uint32 // what the ring's records carry: gprobes' index of (space, probe)
	LogMax int
}

// Spec is what a pad is built from.
type Spec struct {
	At      uint64     // the pad's address
	Addr    uint64     // the probe address
	Covered []x86.Insn // what PlanJump found the jump covers
	Probes  []Probe
	Region  uint64 // the data region's address in the process
	// RingSize is its ring's (pad.RegionSize, a power of two)
	RingSize int
	Held     uint64 // the byte gprobes sets while it holds a signal for a thread in a pad
	Pool     uint64 // the pad stacks' mapping in the process (PoolSize bytes)
	// Live is the tracer's liveness word in the process: bit 30
	// (LiveDead) set, the tracer is gone: the pad runs no probe and never
	// stops for it
	Live uint64
	// Return: a return probe's pad (x86.PlanRetJump). Covered ends with a
	// ret; the instructions before it run first, at the pad's very start,
	// with the thread's registers; then the probes, which see the
	// registers after the ret (rip the return address read at rsp, rsp 8
	// higher, and a ret imm16's bytes); then the ret itself.
	Return bool
}

// LiveDead is the liveness word's bit that says the tracer is gone (the
// kernel's FUTEX_OWNER_DIED: the word is a robust futex of the tracer
// thread).
const LiveDead = 0x40000000

// LiveSize is the size of the page that holds the liveness word (gprobes
// maps it into each process with pads, and unmaps it at detach).
const LiveSize = 4096

// liveCheck emits: the tracer gone (the liveness word at live) -> jump to
// label gone; clobbers rax and the flags.
func liveCheck(e *emitter, live uint64, gone string) {
	e.emit(0x48, 0xb8) // movabs $live,%rax
	e.u64(live)
	e.emit(0xf7, 0x00) // testl $LiveDead,(%rax)
	e.u32(LiveDead)
	e.rel([]byte{0x0f, 0x85}, gone)
}

// Pad is a built pad.
type Pad struct {
	Code []byte
	// Fixups: a fault at the key (an absolute address) goes to the value.
	Fixups map[uint64]uint64
	// TSC: an rdtsc (the key) that faults (the process traps it) goes to
	// the value, which reads the time with a system call; gprobes sets
	// the region's NoTSC byte so that no pad runs rdtsc there again.
	TSC map[uint64]uint64
	// Displaced maps the pad address of each relocated covered
	// instruction (both copies, and the final one) to its original
	// address.
	Displaced map[uint64]uint64
	// Pending maps each instruction of the covered instructions' second
	// copy (run while a record is pending, the thread holding its pad
	// stack) to its twin in the first copy and how far the instructions
	// before it moved rsp: a thread that faults there drops the hit's
	// records (as the int3 route drops the record of a faulting step),
	// frees the pad stack (owner R = rsp - Delta) and takes the signal in
	// the first copy.
	Pending map[uint64]Twin
	// Holding maps each instruction of the first copy (run with nothing
	// pending, no held check after it) to its twin in the third, which
	// ends at the check: a thread gprobes holds a signal for moves there.
	Holding map[uint64]uint64
	// Checked is the jne of the first path's held check; Unwind the four
	// instructions after it (pop %rbp, pop %rax, popfq, lea 128(%rsp)) to
	// the first copy: a thread at Checked or in Unwind has passed the
	// check; gprobes finishes them for it and moves it to the third copy.
	Checked  uint64
	Unwind   [4]uint64
	CopyC    uint64 // the third copy's first instruction
	Final    uint64 // where the last covered instruction (if it transfers control) or the jump back is
	FinalEnd uint64 // the end of that code
	// Sys is the system call a thread leaving with a signal held stops
	// at (its entry and exit), with rax, rcx, r11 and the flags pushed
	// below its red zone
	Sys uint64
	// Popf, Lea and Back (jmp Final) are the instructions between the
	// second held check and Final: a thread stopped there leaves without
	// passing the check again (gprobes finishes them for it: popfq, then
	// rsp += 128)
	Popf, Lea, Back uint64
	Ret             uint64 // where the jump back goes (probe address + covered length)
	// Pushed is where a relocated call's jump is, after the push of its
	// return address (0: the last covered instruction is no call): a
	// thread stopped there has only the jump left
	Pushed uint64
	// StackUse is the bytes of a pad stack the pad uses
	StackUse int
	// Entry is where the pad's own entry is: its first byte, or in a
	// return probe's pad the end of the instructions before the ret
	Entry uint64
}

// Twin is a covered instruction's place in the pad's first copy, and the
// rsp delta of the instructions before it.
type Twin struct {
	A     uint64
	Delta int64
}

type emitter struct {
	b      []byte
	at     uint64
	labels map[string]int
	fix    []fixRel
}

type fixRel struct {
	pos   int // where the rel32 is
	label string
}

func (e *emitter) pc() uint64        { return e.at + uint64(len(e.b)) }
func (e *emitter) emit(b ...byte)    { e.b = append(e.b, b...) }
func (e *emitter) label(name string) { e.labels[name] = len(e.b) }
func (e *emitter) u32(v uint32)      { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *emitter) u64(v uint64)      { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *emitter) i32(v int64)       { e.u32(uint32(int32(v))) }
func (e *emitter) rel(op []byte, l string) {
	e.emit(op...)
	e.fix = append(e.fix, fixRel{len(e.b), l})
	e.u32(0)
}

func (e *emitter) resolve() error {
	for _, f := range e.fix {
		t, ok := e.labels[f.label]
		if !ok {
			return fmt.Errorf("pad: no label %s", f.label)
		}
		binary.LittleEndian.PutUint32(e.b[f.pos:], uint32(int32(t-(f.pos+4))))
	}
	return nil
}

// mem32 emits an instruction with a [base+disp32] operand: rex, opcode
// bytes, then ModRM mod=10 with reg and base (rbp=5, rbx=3, rsp=4 with
// its SIB), disp32.
func (e *emitter) mem32(rex byte, op []byte, reg, base byte, disp int64) {
	if rex != 0 {
		e.emit(rex)
	}
	e.emit(op...)
	e.emit(0x80 | reg<<3 | base)
	if base == 4 {
		e.emit(0x24)
	}
	e.i32(disp)
}

// scratchSize is the bytes a probe's scratch area takes, 16-byte rounded.
func scratchSize(logmax int) int { return (jit.ScratchSize(logmax) + 15) &^ 15 }

// findSlot emits: rdx = the owner word of the slot the value of rcx (R)
// hashes to (its page, Fibonacci-hashed to poolBits bits).
func findSlot(e *emitter) {
	e.emit(0x48, 0x89, 0xca)       // mov %rcx,%rdx
	e.emit(0x48, 0xc1, 0xea, 0x0c) // shr $12,%rdx
	e.emit(0x69, 0xd2)             // imul $0x9e3779b1,%edx,%edx
	e.u32(0x9e3779b1)
	e.emit(0xc1, 0xea, 32-poolBits)          // shr $(32-poolBits),%edx
	e.emit(0x48, 0xc1, 0xe2, slotShift)      // shl $slotShift,%rdx
	e.rel([]byte{0x48, 0x03, 0x15}, "pool0") // add pool0(%rip),%rdx
}

// restoreFrame emits the return from the pad's stack to the thread's, the
// frame at rbp: the flags, rbp and rax go below the thread's red zone
// (with the slot's address when free is set), every other register from
// the frame; then rsp = R - 152 (or - 160) and, with free, the slot freed
// (a store of 0, after the last read of it). Nothing is pushed on the
// pad's stack, whose rsp stays below its scratch areas. popWords emits
// the rest: the words popped, rsp = R, every register the thread's (as
// the programs left them).
func restoreFrame(e *emitter, free bool) {
	e.mem32(0x48, []byte{0x8b}, 0, 5, 7*8) // mov rsp-slot(%rbp),%rax: R
	e.mem32(0, []byte{0xff}, 6, 5, 17*8)   // push flags(%rbp)
	e.mem32(0, []byte{0x8f}, 0, 0, -136)   // pop -136(%rax)
	e.mem32(0, []byte{0xff}, 6, 5, 0)      // push rax(%rbp)
	e.mem32(0, []byte{0x8f}, 0, 0, -144)   // pop -144(%rax)
	e.mem32(0, []byte{0xff}, 6, 5, 6*8)    // push rbp(%rbp)
	e.mem32(0, []byte{0x8f}, 0, 0, -152)   // pop -152(%rax)
	if free {
		e.mem32(0x48, []byte{0x8d}, 1, 5, frameSize) // lea frameSize(%rbp),%rcx: the slot's owner word
		e.mem32(0x48, []byte{0x89}, 1, 0, -160)      // mov %rcx,-160(%rax)
	}
	// frame slots (rpn.Reg order) and x86 register numbers: rbx, rcx,
	// rdx, rsi, rdi, then r8-r15 (rax, rbp and rsp are done apart)
	for slot, r := range []byte{1: 3, 2: 1, 3: 2, 4: 6, 5: 7, 8: 8, 9: 9, 10: 10, 11: 11, 12: 12, 13: 13, 14: 14, 15: 15} {
		if r == 0 {
			continue
		}
		rex := byte(0x48)
		if r >= 8 {
			rex = 0x4c
		}
		e.mem32(rex, []byte{0x8b}, r&7, 5, int64(slot)*8) // mov slot(%rbp),%r
	}
	if free {
		e.mem32(0x48, []byte{0x8d}, 4, 0, -160) // lea -160(%rax),%rsp
		e.emit(0x58)                            // pop %rax: the owner word
		e.emit(0x48, 0xc7, 0x00, 0, 0, 0, 0)    // movq $0,(%rax): the slot is free
	} else {
		e.mem32(0x48, []byte{0x8d}, 4, 0, -152) // lea -152(%rax),%rsp
	}
}

// popWords emits pop %rbp; pop %rax; popfq; lea 128(%rsp),%rsp and
// returns the address of each.
func popWords(e *emitter) [4]uint64 {
	var at [4]uint64
	for i, b := range [][]byte{{0x5d}, {0x58}, {0x9d}, {0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00}} {
		at[i] = e.pc()
		e.emit(b...)
	}
	return at
}

// Build assembles a pad.
func Build(s Spec) (*Pad, error) {
	if len(s.Covered) == 0 || len(s.Probes) == 0 {
		return nil, fmt.Errorf("pad: nothing to build")
	}
	if s.RingSize < MinRingSize || s.RingSize > MaxRingSize || s.RingSize&(s.RingSize-1) != 0 {
		return nil, fmt.Errorf("pad: a ring of %d bytes (a power of two from %d to %d)", s.RingSize, MinRingSize, MaxRingSize)
	}
	covered := 0
	for _, in := range s.Covered {
		covered += in.Len
	}
	// a return probe's pad: the instructions before the ret run first
	var prefix []x86.Insn
	var retPop int64
	if s.Return {
		n := len(s.Covered)
		last := &s.Covered[n-1]
		if !x86.IsRet(last.Bytes) {
			return nil, fmt.Errorf("pad: a return probe's covered instructions end with `%s`, not a ret", last.String())
		}
		prefix, s.Covered = s.Covered[:n-1], s.Covered[n-1:]
		retPop = 8
		if b := last.Bytes; len(b) >= 3 && b[len(b)-3] == 0xc2 {
			retPop += int64(binary.LittleEndian.Uint16(b[len(b)-2:]))
		}
	}
	p := &Pad{Fixups: map[uint64]uint64{}, Displaced: map[uint64]uint64{}, Pending: map[uint64]Twin{}, Holding: map[uint64]uint64{}, TSC: map[uint64]uint64{}, Ret: s.Addr + uint64(covered)}
	total := 0
	offs := make([]int, len(s.Probes))
	for i, pr := range s.Probes {
		if pr.LogMax > MaxLog {
			return nil, fmt.Errorf("logmax %d is more than a ring slot holds (%d)", pr.LogMax, MaxLog)
		}
		offs[i] = total
		total += scratchSize(pr.LogMax)
	}
	// the scratch areas, from rbp (the frame)
	sc0 := -int64(total)
	p.StackUse = frameSize + total + 64 + jit.StackUse + 16*8
	if p.StackUse > SlotUse {
		return nil, fmt.Errorf("the probes at this address need %d bytes of pad stack (their logmax), more than a pad has (%d)", p.StackUse, SlotUse)
	}
	// the covered instructions: how each moves rsp
	var last *x86.Insn
	deltas := make([]int64, len(s.Covered)+1)
	for i := range s.Covered {
		in := &s.Covered[i]
		if r, err := x86.RelocateForPad(in, s.At); err != nil {
			return nil, err
		} else if r.Exits {
			if i != len(s.Covered)-1 {
				return nil, fmt.Errorf("`%s` at %#x transfers control before the last covered instruction", in.String(), in.Addr)
			}
			last = in
			deltas[i+1] = deltas[i]
			break
		}
		d, ok := x86.StackDelta(in)
		if !ok {
			return nil, fmt.Errorf("`%s` at %#x moves rsp in a way the pad cannot follow", in.String(), in.Addr)
		}
		deltas[i+1] = deltas[i] + d
		if deltas[i+1] < -MaxDrop || deltas[i+1] > MaxDrop {
			return nil, fmt.Errorf("the covered instructions move rsp by %d bytes, more than the pad allows (%d)", deltas[i+1], MaxDrop)
		}
	}
	moved := len(s.Covered)
	if last != nil {
		moved--
	}
	delta := deltas[moved]
	e := &emitter{at: s.At, labels: map[string]int{}}

	// a return probe's pad: the instructions before the ret, with the
	// thread's own registers (a signal here is held like one in copy A:
	// the thread passes a held check later on every path)
	for i := range prefix {
		in := &prefix[i]
		r, err := x86.RelocateForPad(in, e.pc())
		if err != nil {
			return nil, err
		}
		if r.Exits {
			return nil, fmt.Errorf("`%s` at %#x transfers control before the ret", in.String(), in.Addr)
		}
		p.Displaced[e.pc()] = in.Addr
		e.emit(r.Code...)
	}
	p.Entry = e.pc()

	// entry: 4 words below the red zone, then a pad stack
	e.emit(0x48, 0x8d, 0x64, 0x24, 0x80) // lea -128(%rsp),%rsp
	e.emit(0x9c, 0x50, 0x51, 0x52)       // pushfq; push rax, rcx, rdx
	// no tracer: no probe, and the path that never stops for one
	liveCheck(e, s.Live, "gone")
	e.mem32(0x48, []byte{0x8d}, 1, 4, StackBelow) // lea 160(%rsp),%rcx: R
	findSlot(e)
	for pass := 1; pass <= 2; pass++ {
		try := fmt.Sprintf("try%d", pass)
		e.label(try)
		e.emit(0x31, 0xc0)                   // xor %eax,%eax
		e.emit(0xf0, 0x48, 0x0f, 0xb1, 0x0a) // lock cmpxchg %rcx,(%rdx)
		e.rel([]byte{0x0f, 0x84}, "got")
		e.emit(0x48, 0x39, 0xc8) // cmp %rcx,%rax: a slot of this very rsp, left by a thread gone from a pad
		e.rel([]byte{0x0f, 0x84}, "got")
		e.emit(0x48, 0x81, 0xc2) // add $SlotStride,%rdx
		e.u32(SlotStride)
		e.rel([]byte{0x48, 0x3b, 0x15}, "poolEnd") // cmp poolEnd(%rip),%rdx
		e.rel([]byte{0x0f, 0x82}, try)             // jb
		e.rel([]byte{0x48, 0x8b, 0x15}, "pool0")   // mov pool0(%rip),%rdx
	}
	// every pad stack taken: no probe runs, the hit is counted missed,
	// the covered instructions run (their copy followed by the held check)
	e.emit(0x48, 0xb8) // movabs $region+OffMissed,%rax
	e.u64(s.Region + OffMissed)
	e.emit(0xf0, 0x48, 0xff, 0x00) // lock incq (%rax)
	for _, pr := range s.Probes {
		e.emit(0x48, 0xb8) // movabs $counters[site].Missed,%rax
		e.u64(s.Region + OffCounters + uint64(pr.Site)*64 + jit.OffMissed)
		e.emit(0xf0, 0x48, 0xff, 0x00) // lock incq (%rax)
	}
	e.emit(0x5a, 0x59, 0x58, 0x9d)                         // pop rdx, rcx, rax; popfq
	e.emit(0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00) // lea 128(%rsp),%rsp
	e.rel([]byte{0xe9}, "copyC")                           // the path that checks the held flag after
	e.label("gone")
	e.emit(0x5a, 0x59, 0x58, 0x9d)                         // pop rdx, rcx, rax; popfq
	e.emit(0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00) // lea 128(%rsp),%rsp
	e.rel([]byte{0xe9}, "copyA")                           // the path that checks nothing

	e.label("got")
	// rdx = our slot's owner word, its stack below; rcx = R
	e.emit(0x48, 0x87, 0xd4)       // xchg %rdx,%rsp: rdx = R - 160
	e.emit(0xff, 0x72, 0x18)       // push 24(%rdx): flags
	e.emit(0x48, 0x83, 0xec, 0x08) // sub $8,%rsp: rip
	for r := byte(7); ; r-- {      // push r15..r8
		e.emit(0x41, 0x50+r)
		if r == 0 {
			break
		}
	}
	e.emit(0x51, 0x55, 0x57, 0x56) // push rcx (R: the rsp slot), rbp, rdi, rsi
	e.emit(0xff, 0x32)             // push (%rdx): rdx
	e.emit(0xff, 0x72, 0x08)       // push 8(%rdx): rcx
	e.emit(0x53)                   // push rbx
	e.emit(0xff, 0x72, 0x10)       // push 16(%rdx): rax
	e.emit(0x48, 0x89, 0xe5)       // mov %rsp,%rbp
	if s.Return {
		// the registers after the ret: rip the return address (at R:
		// rcx), rsp above it
		e.emit(0x48, 0x8b, 0x01)               // mov (%rcx),%rax
		e.mem32(0x48, []byte{0x81}, 0, 5, 7*8) // addq $retPop,rsp(%rbp)
		e.i32(retPop)
	} else {
		e.emit(0x48, 0xb8) // movabs $addr,%rax
		e.u64(s.Addr)
	}
	e.emit(0x48, 0x89, 0x85) // mov %rax,0x80(%rbp)
	e.u32(0x80)
	e.mem32(0x48, []byte{0x8d}, 3, 5, sc0)            // lea sc0(%rbp),%rbx
	e.emit(0x48, 0x89, 0xdc)                          // mov %rbx,%rsp
	e.emit(0x48, 0x83, 0xe4, 0xf0)                    // and $-16,%rsp
	e.mem32(0, []byte{0xc6}, 0, 3, jit.OffPadScratch) // movb $0,pending(%rbx)
	e.emit(0)
	// the thread's id from its thread control block when gprobes found
	// it there (OffTCBTid), else 0: fetched with gettid when needed
	e.emit(0x31, 0xc0) // xor %eax,%eax
	e.emit(0x48, 0xb9) // movabs $region+OffTCBTid,%rcx
	e.u64(s.Region + OffTCBTid)
	e.emit(0x48, 0x8b, 0x09) // mov (%rcx),%rcx
	e.emit(0x48, 0x85, 0xc9) // test %rcx,%rcx
	e.rel([]byte{0x0f, 0x84}, "notcb")
	e.emit(0xf3, 0x48, 0x0f, 0xae, 0xc2) // rdfsbase %rdx
	e.emit(0x48, 0x85, 0xd2)             // test %rdx,%rdx
	e.rel([]byte{0x0f, 0x84}, "notcb")
	tcbLoad := e.pc()
	e.emit(0x8b, 0x04, 0x0a) // mov (%rdx,%rcx),%eax: a fault goes to notcb
	e.label("notcb")
	p.Fixups[tcbLoad] = 0                                  // set once notcb's address is known
	e.mem32(0x48, []byte{0x89}, 0, 3, jit.OffPadScratch+8) // mov %rax,tid(scratch_0)
	for i := range s.Probes {
		e.mem32(0x48, []byte{0x8d}, 3, 5, sc0+int64(offs[i])) // lea scratch_i(%rbp),%rbx
		e.emit(0x31, 0xc0)                                    // xor %eax,%eax
		e.mem32(0x48, []byte{0x89}, 0, 3, jit.OffTSC)         // the time: not read yet
		e.mem32(0x48, []byte{0x89}, 0, 3, jit.OffPid)
		e.mem32(0x48, []byte{0x8b}, 0, 5, sc0+jit.OffPadScratch+8) // the tid, or 0
		e.mem32(0x48, []byte{0x89}, 0, 3, jit.OffTid)
		e.rel([]byte{0xe8}, fmt.Sprintf("prog%d", i))  // call prog_i
		e.mem32(0, []byte{0x88}, 0, 3, jit.OffPadFlag) // mov %al,OffPadFlag(%rbx)
		// a record: its time, read now unless the program did (push ts)
		stamped := fmt.Sprintf("stamped%d", i)
		e.emit(0x85, 0xc0) // test %eax,%eax
		e.rel([]byte{0x0f, 0x84}, stamped)
		e.mem32(0x48, []byte{0x83}, 7, 3, jit.OffTSC) // cmpq $0,OffTSC(%rbx)
		e.emit(0)
		e.rel([]byte{0x0f, 0x85}, stamped)
		e.rel([]byte{0xe8}, "stamp")
		e.label(stamped)
		e.mem32(0, []byte{0x80}, 7, 3, jit.OffPadFlag) // cmpb $2,OffPadFlag(%rbx)
		e.emit(jit.ResultException)
		skip := fmt.Sprintf("noexc%d", i)
		e.rel([]byte{0x0f, 0x85}, skip) // jne
		e.emit(0x41, 0xbc)              // mov $site,%r12d
		e.u32(s.Probes[i].Site)
		e.rel([]byte{0xe8}, "ring") // call ring
		e.label(skip)
		e.mem32(0, []byte{0x80}, 7, 3, jit.OffPadFlag) // cmpb $1,OffPadFlag(%rbx)
		e.emit(jit.ResultCommit)
		nc := fmt.Sprintf("nocommit%d", i)
		e.rel([]byte{0x0f, 0x85}, nc)
		e.mem32(0, []byte{0xc6}, 0, 5, sc0+jit.OffPadScratch) // movb $1,pending(scratch_0)
		e.emit(1)
		e.label(nc)
	}
	if s.Return {
		// rsp back to R in the frame: the way back reads it there
		e.mem32(0x48, []byte{0x81}, 5, 5, 7*8) // subq $retPop,rsp(%rbp)
		e.i32(retPop)
	}
	e.mem32(0, []byte{0x80}, 7, 5, sc0+jit.OffPadScratch) // cmpb $0,pending(scratch_0)
	e.emit(0)
	e.rel([]byte{0x0f, 0x85}, "pend")

	// nothing to commit: the slot freed; the held check while the flags
	// are still below the red zone (the covered instructions then leave
	// the flags alone: no check after them on this path)
	restoreFrame(e, true)
	e.emit(0x80, 0x3d) // cmpb $0,held(%rip): 80 3d rel32 imm8
	e.i32(int64(s.Held - (e.pc() + 5)))
	e.emit(0)
	p.Checked = e.pc()
	e.rel([]byte{0x0f, 0x85}, "toC")
	p.Unwind = popWords(e)

	// the covered instructions, run with the thread's registers and rsp
	copyLabel := func(copy string, i int) string { return fmt.Sprintf("%s%d", copy, i) }
	relocated := func(copy string) error {
		for i := 0; i < moved; i++ {
			in := &s.Covered[i]
			r, err := x86.RelocateForPad(in, e.pc())
			if err != nil {
				return err
			}
			p.Displaced[e.pc()] = in.Addr
			e.label(copyLabel(copy, i))
			e.emit(r.Code...)
		}
		return nil
	}
	twins := func(from, to string, f func(a, b uint64, i int)) {
		for i := 0; i < moved; i++ {
			f(e.at+uint64(e.labels[copyLabel(from, i)]), e.at+uint64(e.labels[copyLabel(to, i)]), i)
		}
	}
	e.label("copyA")
	if err := relocated("A"); err != nil {
		return nil, err
	}
	e.label("final")
	p.Final = e.pc()
	if last != nil {
		r, err := x86.RelocateForPad(last, e.pc())
		if err != nil {
			return nil, err
		}
		p.Displaced[e.pc()] = last.Addr
		if r.Pushed > 0 {
			p.Pushed = e.pc() + uint64(r.Pushed)
		}
		e.emit(r.Code...)
		if r.Exits && !isUncond(last) {
			e.emit(x86.JmpTo(e.pc(), p.Ret)...) // a jcc not taken
		}
	} else {
		e.emit(x86.JmpTo(e.pc(), p.Ret)...)
	}
	p.FinalEnd = e.pc()

	// held: the covered instructions again, then the check and the stop
	e.label("toC")
	popWords(e)
	e.label("copyC")
	p.CopyC = e.pc()
	if err := relocated("C"); err != nil {
		return nil, err
	}
	e.emit(0x48, 0x8d, 0x64, 0x24, 0x80) // lea -128(%rsp),%rsp
	e.emit(0x9c)                         // pushfq
	e.label("cont")
	e.emit(0x80, 0x3d) // cmpb $0,held(%rip)
	e.i32(int64(s.Held - (e.pc() + 5)))
	e.emit(0)
	e.rel([]byte{0x0f, 0x85}, "trap")
	e.label("popf")
	p.Popf = e.pc()
	e.emit(0x9d) // popfq
	p.Lea = e.pc()
	e.emit(0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00) // lea 128(%rsp),%rsp
	p.Back = e.pc()
	e.rel([]byte{0xe9}, "final")

	// trap: a thread leaving with a signal held stops for gprobes, at a
	// system call (getpid) it was resumed to stop at (PTRACE_SYSCALL): a
	// stop that is harmless if gprobes dies meanwhile (a thread stopped at
	// an int3 then died of SIGTRAP), and none at all once the liveness
	// word says gprobes is gone. Other threads that pass here while the
	// flag is set make the call, and go on.
	e.label("trap")
	e.emit(0x50, 0x51, 0x41, 0x53) // push rax, rcx, r11: rsp = R + delta - 160
	liveCheck(e, s.Live, "skip")
	e.emit(0xb8) // mov $39,%eax: getpid
	e.u32(39)
	p.Sys = e.pc()
	e.emit(0x0f, 0x05) // syscall
	e.label("skip")
	e.emit(0x41, 0x5b, 0x59, 0x58) // pop r11, rcx, rax
	e.rel([]byte{0xe9}, "popf")

	// a record pending: the slot kept until it is committed
	e.label("pend")
	restoreFrame(e, false)
	popWords(e)
	if err := relocated("B"); err != nil {
		return nil, err
	}
	twins("A", "C", func(a, c uint64, i int) { p.Holding[a] = c })
	twins("B", "A", func(b, a uint64, i int) { p.Pending[b] = Twin{A: a, Delta: deltas[i]} })
	// post: the flags below the red zone, then rax, rcx, rdx: rsp = R +
	// delta - 160
	e.emit(0x48, 0x8d, 0x64, 0x24, 0x80)                // lea -128(%rsp),%rsp
	e.emit(0x9c, 0x50, 0x51, 0x52)                      // pushfq; push rax, rcx, rdx
	e.mem32(0x48, []byte{0x8d}, 1, 4, StackBelow-delta) // lea (160-delta)(%rsp),%rcx: R
	findSlot(e)
	for pass := 1; pass <= 2; pass++ {
		find := fmt.Sprintf("find%d", pass)
		e.label(find)
		e.emit(0x48, 0x39, 0x0a) // cmp %rcx,(%rdx)
		e.rel([]byte{0x0f, 0x84}, "found")
		e.emit(0x48, 0x81, 0xc2) // add $SlotStride,%rdx
		e.u32(SlotStride)
		e.rel([]byte{0x48, 0x3b, 0x15}, "poolEnd") // cmp poolEnd(%rip),%rdx
		e.rel([]byte{0x0f, 0x82}, find)            // jb
		e.rel([]byte{0x48, 0x8b, 0x15}, "pool0")   // mov pool0(%rip),%rdx
	}
	e.rel([]byte{0xe9}, "postdone") // not found (it cannot be): nothing to commit
	e.label("found")
	e.emit(0x48, 0x89, 0xe0)                               // mov %rsp,%rax: the thread's
	e.mem32(0x48, []byte{0x8d}, 4, 2, -frameSize+sc0-64)   // lea (scratch_0-64)(%rdx),%rsp
	e.emit(0x48, 0x83, 0xe4, 0xf0)                         // and $-16,%rsp
	e.emit(0x50, 0x52, 0x53, 0x55, 0x56, 0x57)             // push rax, rdx, rbx, rbp, rsi, rdi
	e.emit(0x41, 0x50, 0x41, 0x51, 0x41, 0x52, 0x41, 0x53) // push r8-r11
	e.emit(0x41, 0x54, 0x41, 0x54)                         // push r12 (twice: 16-byte aligned)
	e.mem32(0x48, []byte{0x8d}, 5, 2, -frameSize)          // lea -frameSize(%rdx),%rbp: where the frame was
	for i := range s.Probes {
		e.mem32(0x48, []byte{0x8d}, 3, 5, sc0+int64(offs[i])) // lea scratch_i(%rbp),%rbx
		e.mem32(0, []byte{0x80}, 7, 3, jit.OffPadFlag)        // cmpb $1,OffPadFlag(%rbx)
		e.emit(jit.ResultCommit)
		nc := fmt.Sprintf("post%d", i)
		e.rel([]byte{0x0f, 0x85}, nc)
		e.emit(0x41, 0xbc) // mov $site,%r12d
		e.u32(s.Probes[i].Site)
		e.rel([]byte{0xe8}, "ring")
		e.label(nc)
	}
	e.emit(0x41, 0x5c, 0x41, 0x5c)                         // pop r12 (twice)
	e.emit(0x41, 0x5b, 0x41, 0x5a, 0x41, 0x59, 0x41, 0x58) // pop r11-r8
	e.emit(0x5f, 0x5e, 0x5d, 0x5b, 0x5a, 0x58)             // pop rdi, rsi, rbp, rbx, rdx, rax
	e.emit(0x48, 0x89, 0xc4)                               // mov %rax,%rsp: the thread's stack
	e.emit(0x48, 0xc7, 0x02, 0, 0, 0, 0)                   // movq $0,(%rdx): the slot is free
	e.label("postdone")
	e.emit(0x5a, 0x59, 0x58) // pop rdx, rcx, rax
	e.rel([]byte{0xe9}, "cont")

	e.label("ring")
	ring(e, s.Region, s.RingSize)
	stamp(e, p, s.Region)

	for i, pr := range s.Probes {
		for len(e.b)%16 != 0 {
			e.emit(0xcc)
		}
		e.label(fmt.Sprintf("prog%d", i))
		base := e.pc()
		e.emit(pr.Code.Bytes...)
		for _, f := range pr.Code.Fixups {
			p.Fixups[base+uint64(f.At)] = base + uint64(f.Handler)
		}
		for _, f := range pr.Code.TSC {
			p.TSC[base+uint64(f.At)] = base + uint64(f.Handler)
		}
	}
	for len(e.b)%8 != 0 {
		e.emit(0xcc)
	}
	e.label("pool0")
	e.u64(s.Pool + slotTop)
	e.label("poolEnd")
	e.u64(s.Pool + PoolSize)
	if err := e.resolve(); err != nil {
		return nil, err
	}
	p.Fixups[tcbLoad] = s.At + uint64(e.labels["notcb"])
	p.Code = e.b
	return p, nil
}

// SlotOf returns the owner word of the slot a thread at rsp r starts its
// search from (the pad's findSlot), and the pool's end: gprobes looks for
// a slot whose owner is r from there, wrapping to Pool+slotTop.
func SlotOf(pool, r uint64) (first, end uint64) {
	k := uint64(uint32(r>>12)*0x9e3779b1) >> (32 - poolBits)
	return pool + slotTop + k<<slotShift, pool + PoolSize
}

// FirstSlot is the owner word of the pool's first slot.
func FirstSlot(pool uint64) uint64 { return pool + slotTop }

// isUncond: the relocated instruction never falls through (jmp, call,
// ret, indirect jmp); a jcc does.
func isUncond(in *x86.Insn) bool {
	b := in.Bytes
	i := 0
	for i < len(b) && (b[i] == 0x66 || b[i] == 0xf2 || b[i] == 0xf3 || b[i] == 0x2e || b[i] == 0x3e || b[i]&0xf0 == 0x40) {
		i++
	}
	if i >= len(b) {
		return true
	}
	op := b[i]
	switch {
	case op >= 0x70 && op <= 0x7f:
		return false
	case op == 0x0f && i+1 < len(b) && b[i+1] >= 0x80 && b[i+1] <= 0x8f:
		return false
	}
	return true
}

// ring emits the commit routine: reserve the record's bytes in the ring
// (lock cmpxchg on the head; a record that would pass the ring's end is
// preceded by a padding record to the end; a full ring counts the record
// lost, in the region and in the probe's counters), write the record, then
// its header word with the committed flag (a plain store: x86 keeps the
// stores in order). In: rbx = scratch, r12d = site. Clobbers rax, rcx,
// rdx, rsi, rdi, r8-r11 and the flags.
func ring(e *emitter, region uint64, size int) {
	// tid: cached by the program, else gettid
	e.mem32(0x48, []byte{0x8b}, 0, 3, jit.OffTid) // mov OffTid(%rbx),%rax
	e.emit(0x48, 0x85, 0xc0)                      // test %rax,%rax
	e.emit(0x75, 14)                              // jnz: over the next 14 bytes
	e.emit(0xb8)                                  // mov $186,%eax (gettid)
	e.u32(186)
	e.emit(0x0f, 0x05)                            // syscall
	e.mem32(0x48, []byte{0x89}, 0, 3, jit.OffTid) // mov %rax,OffTid(%rbx)
	// r9 = the record's length: header + log rounded to 8
	logLen(e)
	e.emit(0x4c, 0x8d, 0x49, recData+7) // lea recData+7(%rcx),%r9
	e.emit(0x49, 0x83, 0xe1, 0xf8)      // and $-8,%r9
	e.emit(0x48, 0xbe)                  // movabs $region,%rsi
	e.u64(region)
	e.label("retry")
	e.mem32(0x48, []byte{0x8b}, 0, 6, OffHead) // mov OffHead(%rsi),%rax   h
	e.emit(0x48, 0x89, 0xc2)                   // mov %rax,%rdx
	e.emit(0x48, 0x81, 0xe2)                   // and $RingSize-1,%rdx     pos
	e.u32(uint32(size - 1))
	e.emit(0x4d, 0x89, 0xca)       // mov %r9,%r10                  need = len
	e.emit(0x4e, 0x8d, 0x1c, 0x0a) // lea (%rdx,%r9),%r11
	e.emit(0x49, 0x81, 0xfb)       // cmp $RingSize,%r11
	e.u32(uint32(size))
	e.emit(0x76, 12)   // jbe fits (over 12 bytes)
	e.emit(0x41, 0xba) // mov $RingSize,%r10d           6
	e.u32(uint32(size))
	e.emit(0x49, 0x29, 0xd2) // sub %rdx,%r10                    3
	e.emit(0x4d, 0x01, 0xca) // add %r9,%r10                     3
	// fits:
	e.emit(0x4e, 0x8d, 0x04, 0x10)             // lea (%rax,%r10),%r8   new head
	e.emit(0x4d, 0x89, 0xc3)                   // mov %r8,%r11
	e.mem32(0x4c, []byte{0x2b}, 3, 6, OffTail) // sub OffTail(%rsi),%r11  used
	// negative: the head read above is stale (other threads committed
	// and the drain moved the tail past it meanwhile); the cmpxchg would
	// fail: read it again (taken for "full", a record was counted lost
	// with the ring nearly empty: once in about 100,000 records of 4
	// threads under a signal storm)
	e.rel([]byte{0x0f, 0x88}, "retry") // js retry
	e.emit(0x49, 0x81, 0xfb)           // cmp $RingSize,%r11
	e.u32(uint32(size))
	e.rel([]byte{0x0f, 0x87}, "full")                // ja full
	e.emit(0xf0)                                     // lock
	e.mem32(0x4c, []byte{0x0f, 0xb1}, 0, 6, OffHead) // cmpxchg %r8,OffHead(%rsi)
	e.rel([]byte{0x0f, 0x85}, "retry")
	e.emit(0x48, 0x8d, 0xbe) // lea OffRing(%rsi),%rdi
	e.u32(OffRing)
	e.emit(0x4d, 0x39, 0xca) // cmp %r9,%r10
	e.emit(0x74, 24)         // je nopad (over 24 bytes)
	// a padding record from pos to the ring's end
	e.emit(0xb9) // mov $RingSize,%ecx                       5
	e.u32(uint32(size))
	e.emit(0x48, 0x29, 0xd1)             // sub %rdx,%rcx          3
	e.emit(0x48, 0x0f, 0xba, 0xe9, 0x3f) // bts $63,%rcx           5
	e.emit(0x48, 0x0f, 0xba, 0xe9, 0x3e) // bts $62,%rcx           5
	e.emit(0x48, 0x89, 0x0c, 0x17)       // mov %rcx,(%rdi,%rdx)   4
	e.emit(0x31, 0xd2)                   // xor %edx,%edx          2 = 24
	// nopad: rdx = the record
	e.emit(0x48, 0x01, 0xfa)                   // add %rdi,%rdx
	e.emit(0x44, 0x89, 0x62, recSite)          // mov %r12d,8(%rdx)
	e.mem32(0, []byte{0x8b}, 0, 3, jit.OffTid) // mov OffTid(%rbx),%eax
	e.emit(0x89, 0x42, recTid)                 // mov %eax,12(%rdx)
	e.mem32(0x48, []byte{0x8b}, 0, 3, jit.OffTSC)
	e.emit(0x48, 0x89, 0x42, recTSC)
	e.mem32(0x48, []byte{0x8b}, 0, 3, 0) // exit..minor
	e.emit(0x48, 0x89, 0x42, recHdr)
	e.mem32(0x48, []byte{0x8b}, 0, 3, jit.OffPC) // pc, loglen
	e.emit(0x48, 0x89, 0x42, recPC)
	e.mem32(0x48, []byte{0x8b}, 0, 3, jit.OffAddr)
	e.emit(0x48, 0x89, 0x42, recAddr)
	logLen(e)
	e.emit(0x89, 0x4a, recLogLen)                 // mov %ecx,36(%rdx): what the record holds
	e.mem32(0x48, []byte{0x8d}, 6, 3, jit.OffLog) // lea OffLog(%rbx),%rsi
	e.emit(0x48, 0x8d, 0x7a, recData)             // lea 48(%rdx),%rdi
	e.emit(0xfc)                                  // cld
	e.emit(0xf3, 0xa4)                            // rep movsb
	e.emit(0x4c, 0x89, 0xc8)                      // mov %r9,%rax
	e.emit(0x48, 0x0f, 0xba, 0xe8, 0x3f)          // bts $63,%rax
	e.emit(0x48, 0x89, 0x02)                      // mov %rax,(%rdx): committed
	e.emit(0xc3)
	e.label("full")
	e.emit(0xf0, 0x48, 0xff, 0x86) // lock incq OffLost(%rsi)
	e.u32(OffLost)
	// and the probe's own count: counters[site].Lost
	e.emit(0x44, 0x89, 0xe1)             // mov %r12d,%ecx
	e.emit(0x48, 0xc1, 0xe1, 0x06)       // shl $6,%rcx
	e.emit(0xf0, 0x48, 0xff, 0x84, 0x0e) // lock incq OffCounters+40(%rsi,%rcx)
	e.u32(OffCounters + 40)
	e.emit(0xc3)
}

// stamp emits the routine that reads a record's time stamp into
// OffTSC(%rbx) (as jit's push ts does): rdtsc, or with the region's NoTSC
// byte set the clock_gettime(CLOCK_REALTIME) system call (ns | StampNS;
// StampNS alone if it fails). The rdtsc is in p.TSC with the system call
// as its handler. Clobbers rax, rcx, rdx, rsi, rdi, r11 and the flags.
func stamp(e *emitter, p *Pad, region uint64) {
	e.label("stamp")
	e.emit(0x48, 0xbe) // movabs $region+OffNoTSC,%rsi
	e.u64(region + OffNoTSC)
	e.emit(0x80, 0x3e, 0x00) // cmpb $0,(%rsi)
	e.rel([]byte{0x0f, 0x85}, "stampSlow")
	tsc := e.pc()
	e.emit(0x0f, 0x31)                            // rdtsc
	e.emit(0x48, 0xc1, 0xe2, 0x20)                // shl $32,%rdx
	e.emit(0x48, 0x09, 0xd0)                      // or %rdx,%rax
	e.mem32(0x48, []byte{0x89}, 0, 3, jit.OffTSC) // mov %rax,OffTSC(%rbx)
	e.emit(0xc3)                                  // ret
	e.label("stampSlow")
	p.TSC[tsc] = e.pc()
	e.emit(0x48, 0x83, 0xec, 0x10) // sub $16,%rsp
	e.emit(0x31, 0xff)             // xor %edi,%edi: CLOCK_REALTIME
	e.emit(0x48, 0x89, 0xe6)       // mov %rsp,%rsi
	e.emit(0xb8)                   // mov $228,%eax: clock_gettime
	e.u32(228)
	e.emit(0x0f, 0x05)       // syscall
	e.emit(0x48, 0x85, 0xc0) // test %rax,%rax
	e.rel([]byte{0x0f, 0x85}, "stampFail")
	e.emit(0x48, 0x69, 0x04, 0x24) // imul $1e9,(%rsp),%rax
	e.u32(1000000000)
	e.emit(0x48, 0x03, 0x44, 0x24, 0x08) // add 8(%rsp),%rax
	e.rel([]byte{0xe9}, "stampDone")
	e.label("stampFail")
	e.emit(0x31, 0xc0) // xor %eax,%eax: the time could not be read
	e.label("stampDone")
	e.emit(0x48, 0x0f, 0xba, 0xe8, 0x3f)          // bts $63,%rax
	e.emit(0x48, 0x83, 0xc4, 0x10)                // add $16,%rsp
	e.mem32(0x48, []byte{0x89}, 0, 3, jit.OffTSC) // mov %rax,OffTSC(%rbx)
	e.emit(0xc3)                                  // ret
}

// logLen emits ecx = the scratch's log length, at most MaxLog (the
// compiled code keeps it at most logmax; the ring never trusts it more).
func logLen(e *emitter) {
	e.mem32(0, []byte{0x8b}, 1, 3, jit.OffLogLen) // mov OffLogLen(%rbx),%ecx
	e.emit(0x81, 0xf9)                            // cmp $MaxLog,%ecx
	e.u32(MaxLog)
	e.emit(0x76, 0x05) // jbe +5
	e.emit(0xb9)       // mov $MaxLog,%ecx
	e.u32(MaxLog)
}
