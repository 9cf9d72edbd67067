package pad

import (
	"encoding/binary"
	"fmt"

	"github.com/gprobes/gprobes/engine/x86"
	"github.com/gprobes/gprobes/jit"
)

// A pad, from its first byte (the probe's jump lands there):
//
//	pre:   lea -128(%rsp),%rsp          skip the interrupted code's red zone
//	       pushfq; sub $8,%rsp; push r15..r8, rsp, rbp, rdi, rsi, rdx, rcx, rbx, rax
//	       mov %rsp,%rbp                 the frame, indexed by rpn.Reg (jit's contract)
//	       frame.rsp = the rsp at the probe; frame.rip = the probe address
//	       scratch_0 = rbp - Gap - total scratch; rsp = scratch_0 & -16
//	       rdtsc into scratch_0; clear the pending flag
//	       for each probe i: rbx = scratch_i; tsc, pid, tid; call prog_i;
//	                         record the result; an exception commits now,
//	                         a record to commit sets the pending flag
//	       mov %rbp,%rsp; pop ...; popfq; lea 128(%rsp),%rsp
//	       (the registers are the thread's again, as a program left them)
//	disp:  the covered instructions but a last one that transfers control,
//	       relocated
//	post:  cmpb $0, pending(%rsp)        found again from rsp: the covered
//	       jne commit                    instructions moved it by a known delta
//	cont:  cmpb $0, held(%rip)           a signal gprobes holds for a thread
//	       je final                      inside a pad: stop here (int3)
//	       int3
//	final: the last covered instruction if it transfers control, else
//	       jmp back to the probe address + covered length
//	commit: save everything, commit each pending record to the ring,
//	       restore, jmp cont
//	ring:  the commit routine (r12d = the record's site, rbx = scratch)
//	progs: the compiled programs
//
// The pad's state lives on the thread's stack below the red zone: the
// frame, then Gap bytes the covered instructions may write (pushes, a
// sub from rsp), then the scratch areas. Nothing is allocated per thread,
// and a signal delivered in the pad lands below it all.
const (
	redZone   = 128
	frameSize = 18 * 8
	// Gap is the room below the frame left to the covered instructions,
	// which run with the thread's own rsp: StackDelta must not go below
	// -MaxDrop.
	Gap     = 512
	MaxDrop = 256
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
}

// Pad is a built pad.
type Pad struct {
	Code []byte
	// Fixups: a fault at the key (an absolute address) goes to the value.
	Fixups map[uint64]uint64
	// Displaced maps the pad address of each relocated covered
	// instruction to its original address.
	Displaced map[uint64]uint64
	Final     uint64 // where the last covered instruction (if it transfers control) or the jump back is
	FinalEnd  uint64 // the end of that code
	Trap      uint64 // the int3 a thread leaving with a signal held stops at
	// Popf and Lea are the two instructions between the held check and
	// Final: a thread stopped there leaves without passing the check
	// again (gprobes finishes them for it: popfq, then rsp += 128)
	Popf, Lea uint64
	Ret       uint64 // where the jump back goes (probe address + covered length)
	// Pushed is where a relocated call's jump is, after the push of its
	// return address (0: the last covered instruction is no call): a
	// thread stopped there has only the jump left
	Pushed   uint64
	StackUse int // bytes below the thread's rsp the pad uses
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
	p := &Pad{Fixups: map[uint64]uint64{}, Displaced: map[uint64]uint64{}, Ret: s.Addr + uint64(covered)}
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
	sc0 := -int64(Gap + total)
	p.StackUse = redZone + frameSize + Gap + total + jit.StackUse + 64
	e := &emitter{at: s.At, labels: map[string]int{}}

	// pre
	e.emit(0x48, 0x8d, 0x64, 0x24, 0x80) // lea -128(%rsp),%rsp
	e.emit(0x9c)                         // pushfq
	e.emit(0x48, 0x83, 0xec, 0x08)       // sub $8,%rsp (rip slot)
	for r := byte(7); ; r-- {            // push r15..r8
		e.emit(0x41, 0x50+r)
		if r == 0 {
			break
		}
	}
	e.emit(0x54, 0x55, 0x57, 0x56, 0x52, 0x51, 0x53, 0x50) // push rsp rbp rdi rsi rdx rcx rbx rax
	e.emit(0x48, 0x89, 0xe5)                               // mov %rsp,%rbp
	e.mem32(0x48, []byte{0x8d}, 0, 5, frameSize+redZone)   // lea 0x110(%rbp),%rax
	e.emit(0x48, 0x89, 0x45, 0x38)                         // mov %rax,0x38(%rbp)
	e.emit(0x48, 0xb8)                                     // movabs $addr,%rax
	e.u64(s.Addr)
	e.emit(0x48, 0x89, 0x85) // mov %rax,0x80(%rbp)
	e.u32(0x80)
	e.mem32(0x48, []byte{0x8d}, 3, 5, sc0)            // lea sc0(%rbp),%rbx
	e.emit(0x48, 0x89, 0xdc)                          // mov %rbx,%rsp
	e.emit(0x48, 0x83, 0xe4, 0xf0)                    // and $-16,%rsp
	e.emit(0x0f, 0x31)                                // rdtsc
	e.emit(0x48, 0xc1, 0xe2, 0x20)                    // shl $32,%rdx
	e.emit(0x48, 0x09, 0xd0)                          // or %rdx,%rax
	e.mem32(0x48, []byte{0x89}, 0, 3, jit.OffTSC)     // mov %rax,OffTSC(%rbx)
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
		// tsc from scratch_0: rax is the program's to clobber
		e.mem32(0x48, []byte{0x8b}, 0, 5, sc0+jit.OffTSC) // mov sc0+OffTSC(%rbp),%rax
		e.mem32(0x48, []byte{0x89}, 0, 3, jit.OffTSC)     // mov %rax,OffTSC(%rbx)
		e.emit(0x31, 0xc0)                                // xor %eax,%eax
		e.mem32(0x48, []byte{0x89}, 0, 3, jit.OffPid)
		e.mem32(0x48, []byte{0x8b}, 0, 5, sc0+jit.OffPadScratch+8) // the tid, or 0
		e.mem32(0x48, []byte{0x89}, 0, 3, jit.OffTid)
		e.rel([]byte{0xe8}, fmt.Sprintf("prog%d", i))  // call prog_i
		e.mem32(0, []byte{0x88}, 0, 3, jit.OffPadFlag) // mov %al,OffPadFlag(%rbx)
		e.emit(0x83, 0xf8, jit.ResultException)        // cmp $2,%eax
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
	restore := func() {
		e.emit(0x48, 0x89, 0xec) // mov %rbp,%rsp
	}
	restore()
	e.emit(0x58, 0x5b, 0x59, 0x5a, 0x5e, 0x5f, 0x5d) // pop rax rbx rcx rdx rsi rdi rbp
	e.emit(0x48, 0x83, 0xc4, 0x08)                   // add $8,%rsp (rsp slot)
	for r := byte(0); r < 8; r++ {                   // pop r8..r15
		e.emit(0x41, 0x58+r)
	}
	e.emit(0x48, 0x83, 0xc4, 0x08)                         // add $8,%rsp (rip slot)
	e.emit(0x9d)                                           // popfq
	e.emit(0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00) // lea 128(%rsp),%rsp

	// the covered instructions
	var delta int64
	var last *x86.Relocated
	var lastIn *x86.Insn
	for i := range s.Covered {
		in := &s.Covered[i]
		r, err := x86.RelocateForPad(in, e.pc())
		if err != nil {
			return nil, err
		}
		if r.Exits {
			if i != len(s.Covered)-1 {
				return nil, fmt.Errorf("`%s` at %#x transfers control before the last covered instruction", in.String(), in.Addr)
			}
			last, lastIn = &r, in
			break
		}
		d, ok := x86.StackDelta(in)
		if !ok {
			return nil, fmt.Errorf("`%s` at %#x moves rsp in a way the pad cannot follow", in.String(), in.Addr)
		}
		delta += d
		if delta < -MaxDrop || delta > MaxDrop {
			return nil, fmt.Errorf("the covered instructions move rsp by %d bytes, more than the pad allows (%d)", delta, MaxDrop)
		}
		p.Displaced[e.pc()] = in.Addr
		e.emit(r.Code...)
	}

	// post: the flags are the covered instructions' (a cmp covered, a jcc
	// after it): kept on the stack, below the red zone, while the pad
	// looks at its own bytes. rsp = orig + delta - 136 then;
	// scratch_0 = orig - redZone - frameSize + sc0
	e.emit(0x48, 0x8d, 0x64, 0x24, 0x80) // lea -128(%rsp),%rsp
	e.emit(0x9c)                         // pushfq
	pendingFromRSP := -int64(redZone+frameSize) + sc0 + jit.OffPadScratch - delta + redZone + 8
	e.mem32(0, []byte{0x80}, 7, 4, pendingFromRSP) // cmpb $0,pending(%rsp)
	e.emit(0)
	e.rel([]byte{0x0f, 0x85}, "commit")
	e.label("cont")
	// cmpb $0,held(%rip): 80 3d rel32 imm8
	e.emit(0x80, 0x3d)
	e.i32(int64(s.Held - (e.pc() + 5)))
	e.emit(0)
	e.rel([]byte{0x0f, 0x85}, "trap")
	p.Popf = e.pc()
	e.emit(0x9d) // popfq
	p.Lea = e.pc()
	e.emit(0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00) // lea 128(%rsp),%rsp
	e.label("final")
	p.Final = e.pc()
	if last != nil {
		r, err := x86.RelocateForPad(lastIn, e.pc())
		if err != nil {
			return nil, err
		}
		p.Displaced[e.pc()] = lastIn.Addr
		if r.Pushed > 0 {
			p.Pushed = e.pc() + uint64(r.Pushed)
		}
		e.emit(r.Code...)
		if r.Exits && !isUncond(lastIn) {
			e.emit(x86.JmpTo(e.pc(), p.Ret)...) // a jcc not taken
		}
	} else {
		e.emit(x86.JmpTo(e.pc(), p.Ret)...)
	}
	p.FinalEnd = e.pc()

	// trap: a thread leaving with a signal held stops at the int3
	e.label("trap")
	e.emit(0x9d)                                           // popfq
	e.emit(0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00) // lea 128(%rsp),%rsp
	p.Trap = e.pc()
	e.emit(0xcc)
	e.rel([]byte{0xe9}, "final")

	// commit: after the covered instructions; the flags are pushed
	// already, below the red zone
	e.label("commit")
	e.emit(0x50, 0x53, 0x51, 0x52, 0x56, 0x57, 0x55)
	for r := byte(0); r < 8; r++ {
		e.emit(0x41, 0x50+r)
	}
	e.emit(0x48, 0x89, 0xe5) // mov %rsp,%rbp
	// rbp = orig + delta - redZone - 16*8; scratch_0 = orig - redZone - frameSize + sc0
	sc0FromRBP := -int64(frameSize) + sc0 + 16*8 - delta
	e.mem32(0x48, []byte{0x8d}, 3, 5, sc0FromRBP-64) // lea (scratch_0-64)(%rbp),%rbx
	e.emit(0x48, 0x89, 0xdc)                         // mov %rbx,%rsp
	e.emit(0x48, 0x83, 0xe4, 0xf0)                   // and $-16,%rsp
	for i := range s.Probes {
		e.mem32(0x48, []byte{0x8d}, 3, 5, sc0FromRBP+int64(offs[i])) // lea scratch_i(%rbp),%rbx
		e.mem32(0, []byte{0x80}, 7, 3, jit.OffPadFlag)               // cmpb $1,OffPadFlag(%rbx)
		e.emit(jit.ResultCommit)
		nc := fmt.Sprintf("post%d", i)
		e.rel([]byte{0x0f, 0x85}, nc)
		e.emit(0x41, 0xbc) // mov $site,%r12d
		e.u32(s.Probes[i].Site)
		e.rel([]byte{0xe8}, "ring")
		e.label(nc)
	}
	e.emit(0x48, 0x89, 0xec) // mov %rbp,%rsp
	for r := byte(7); ; r-- {
		e.emit(0x41, 0x58+r)
		if r == 0 {
			break
		}
	}
	e.emit(0x5d, 0x5f, 0x5e, 0x5a, 0x59, 0x5b, 0x58)
	e.rel([]byte{0xe9}, "cont")

	e.label("ring")
	ring(e, s.Region, s.RingSize)

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
	}
	if err := e.resolve(); err != nil {
		return nil, err
	}
	p.Fixups[tcbLoad] = s.At + uint64(e.labels["notcb"])
	p.Code = e.b
	return p, nil
}

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
	e.emit(0x49, 0x81, 0xfb)                   // cmp $RingSize,%r11
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
