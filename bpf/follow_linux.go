package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// FollowMax is how many processes (and their threads) a Follow set holds
// at once: a process started when it is full is not followed, and
// Follow.Full says so.
const FollowMax = 1 << 16

// Follow is a process and every process it starts, from then on: the
// set of processes a kernel target's probes count when it runs one
// command (gprobes run --target kernel -- COMMAND). Its map holds the
// process ids (tgids) in it; two tracepoint programs keep it, in the
// kernel, as processes fork and exit: sched_process_fork adds the child
// of a process in the set before the child runs, sched_process_exit takes
// a process out when its last thread ends. A new thread's id goes in too
// (the fork tracepoint does not tell a thread from a process) and comes
// out when the thread ends: while a thread lives no process has its id.
// A probe compiled with Options.Follow counts a hit only in a process of
// the set.
type Follow struct {
	Map   *ebpf.Map
	progs []*ebpf.Program
	links []link.Link
	full  *ebpf.Map
}

// NewFollow makes the set holding process pid and starts following what
// it starts. Close stops it.
func NewFollow(pid uint32) (*Follow, error) {
	f := &Follow{}
	var err error
	if f.Map, err = ebpf.NewMap(&ebpf.MapSpec{Name: "gp_follow", Type: ebpf.Hash, KeySize: 4, ValueSize: 1, MaxEntries: FollowMax}); err != nil {
		return nil, fmt.Errorf("follow process %d: the map: %w", pid, err)
	}
	if f.full, err = ebpf.NewMap(&ebpf.MapSpec{Name: "gp_follow_full", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1}); err != nil {
		f.Close()
		return nil, fmt.Errorf("follow process %d: the map: %w", pid, err)
	}
	if err := f.Map.Put(pid, uint8(1)); err != nil {
		f.Close()
		return nil, fmt.Errorf("follow process %d: %w", pid, err)
	}
	fork, err := ReadFormat("sched", "sched_process_fork")
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("follow process %d's children: %w", pid, err)
	}
	child, err := fork.Field("child_pid")
	if err != nil || child.Size != 4 {
		f.Close()
		return nil, fmt.Errorf("follow process %d's children: sched:sched_process_fork has no 4-byte child_pid (%v)", pid, err)
	}
	exit, err := ReadFormat("sched", "sched_process_exit")
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("follow process %d's children: %w", pid, err)
	}
	groupDead := -1 // the kernel's group_dead (6.x); else a process ends with its first thread
	if gd, err := exit.Field("group_dead"); err == nil && gd.Size == 1 {
		groupDead = gd.Offset
	}
	for _, p := range []struct {
		event string
		ins   asm.Instructions
	}{{"sched_process_fork", f.forkProgram(child.Offset)}, {"sched_process_exit", f.exitProgram(groupDead)}} {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "gp_follow", Type: ebpf.TracePoint, License: "GPL", Instructions: p.ins})
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("follow process %d's children: the %s program: %w", pid, p.event, err)
		}
		f.progs = append(f.progs, prog)
		l, err := link.Tracepoint("sched", p.event, prog, nil)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("follow process %d's children: attach to sched:%s: %w", pid, p.event, err)
		}
		f.links = append(f.links, l)
	}
	return f, nil
}

// forkProgram adds the child to the set when its parent (the current
// task) is in it; a full set counts the child in full.
func (f *Follow) forkProgram(childOff int) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.FnGetCurrentPidTgid.Call(),
		asm.RSh.Imm(asm.R0, 32),
		asm.StoreMem(asm.RFP, -4, asm.R0, asm.Word),
		asm.LoadMapPtr(asm.R1, f.Map.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.LoadMem(asm.R1, asm.R6, int16(childOff), asm.Word),
		asm.StoreMem(asm.RFP, -8, asm.R1, asm.Word),
		asm.StoreImm(asm.RFP, -12, 1, asm.Byte),
		asm.LoadMapPtr(asm.R1, f.Map.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -12),
		asm.Mov.Imm(asm.R4, 0), // BPF_ANY
		asm.FnMapUpdateElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		// the set is full: count it
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, f.full.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return(),
	}
}

// exitProgram takes an ending thread's id out of the set when it is not
// its process's (a thread's own entry), and the process's id when its
// last thread ends (groupDead, the offset of the event's group_dead; -1:
// when the thread whose id is the process's ends).
func (f *Follow) exitProgram(groupDead int) asm.Instructions {
	ins := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.FnGetCurrentPidTgid.Call(),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.RSh.Imm(asm.R7, 32),       // tgid
		asm.Mov.Reg32(asm.R8, asm.R0), // tid
		asm.JEq.Reg(asm.R7, asm.R8, "leader"),
		asm.StoreMem(asm.RFP, -4, asm.R8, asm.Word),
		asm.LoadMapPtr(asm.R1, f.Map.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapDeleteElem.Call(),
	}
	if groupDead >= 0 {
		ins = append(ins,
			asm.LoadMem(asm.R1, asm.R6, int16(groupDead), asm.Byte).WithSymbol("leader"),
			asm.JEq.Imm(asm.R1, 0, "out"),
		)
	} else {
		ins = append(ins, asm.Ja.Label("out"), asm.Mov.Imm(asm.R0, 0).WithSymbol("leader"))
	}
	return append(ins,
		asm.StoreMem(asm.RFP, -4, asm.R7, asm.Word),
		asm.LoadMapPtr(asm.R1, f.Map.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapDeleteElem.Call(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return(),
	)
}

// Full is how many processes were started in the set when it was full,
// and so not followed.
func (f *Follow) Full() uint64 {
	var n uint64
	if f.full != nil {
		// unchecked: a one-entry array's key 0 is always there; an error
		// would leave 0, the count of a set never full
		f.full.Lookup(uint32(0), &n)
	}
	return n
}

// Close stops following and frees the set.
func (f *Follow) Close() error {
	var errs []error
	for _, l := range f.links {
		errs = append(errs, l.Close())
	}
	for _, p := range f.progs {
		errs = append(errs, p.Close())
	}
	if f.Map != nil {
		errs = append(errs, f.Map.Close())
	}
	if f.full != nil {
		errs = append(errs, f.full.Close())
	}
	f.links, f.progs, f.Map, f.full = nil, nil, nil, nil
	return errors.Join(errs...)
}
