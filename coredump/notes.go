package coredump

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"unsafe"
)

// Note types (the "CORE" notes of <linux/elf.h>).
const (
	ntPRSTATUS = 1
	ntFPREGSET = 2
	ntPRPSINFO = 3
	ntAUXV     = 6
	ntSIGINFO  = 0x53494749
	ntFILE     = 0x46494c45
)

// Sizes of the x86_64 structures in the notes.
const (
	prstatusSize = 336 // struct elf_prstatus
	prpsinfoSize = 136 // struct elf_prpsinfo
	siginfoSize  = 128 // siginfo_t
	fxsaveSize   = 512 // struct user_fpregs_struct (FXSAVE area)
	regsSize     = 27 * 8
	userHZ       = 100 // the clock tick of /proc, fixed by the kernel ABI
)

var le = binary.LittleEndian

type noteBuf struct{ b []byte }

// add appends one note: the 4-byte alignment of name and descriptor is
// the one of Linux cores, 64-bit ones included.
func (n *noteBuf) add(name string, typ uint32, desc []byte) {
	var h [12]byte
	le.PutUint32(h[0:], uint32(len(name)+1))
	le.PutUint32(h[4:], uint32(len(desc)))
	le.PutUint32(h[8:], typ)
	n.b = append(n.b, h[:]...)
	n.b = append(n.b, name...)
	n.b = append(n.b, 0)
	n.b = pad4(n.b)
	n.b = append(n.b, desc...)
	n.b = pad4(n.b)
}

func pad4(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// regsBytes is the user_regs_struct of a thread, byte for byte.
func regsBytes(r *Regs) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(r)), regsSize)
}

func putTimeval(b []byte, ticks uint64) {
	le.PutUint64(b, ticks/userHZ)
	le.PutUint64(b[8:], (ticks%userHZ)*(1000000/userHZ))
}

// prstatus builds struct elf_prstatus for one thread; sig is the signal
// it reports.
func prstatus(th *Thread, sig int, ts, ps procStat, tstatus map[string]string) []byte {
	b := make([]byte, prstatusSize)
	le.PutUint32(b[0:], uint32(sig)) // pr_info.si_signo
	le.PutUint16(b[12:], uint16(sig))
	le.PutUint64(b[16:], statusHex(tstatus, "SigPnd"))
	le.PutUint64(b[24:], statusHex(tstatus, "SigBlk"))
	le.PutUint32(b[32:], uint32(th.TID))
	le.PutUint32(b[36:], uint32(ps.ppid))
	le.PutUint32(b[40:], uint32(ps.pgrp))
	le.PutUint32(b[44:], uint32(ps.sid))
	putTimeval(b[48:], ts.utime)
	putTimeval(b[64:], ts.stime)
	putTimeval(b[80:], ps.cutime)
	putTimeval(b[96:], ps.cstime)
	copy(b[112:112+regsSize], regsBytes(&th.Regs))
	if th.FPRegs != nil {
		le.PutUint32(b[328:], 1) // pr_fpvalid
	}
	return b
}

// prpsinfo builds struct elf_prpsinfo as the kernel fills it.
func prpsinfo(pid int, ps procStat, status map[string]string, cmdline []byte) []byte {
	b := make([]byte, prpsinfoSize)
	state := ps.state
	if state == 't' { // tracing stop: the kernel's TASK_TRACED
		state = 'T'
	}
	if i := strings.IndexByte("RSDTZW", state); i >= 0 {
		b[0], b[1] = byte(i), state
	} else {
		b[0], b[1] = 6, '.'
	}
	if state == 'Z' {
		b[2] = 1
	}
	b[3] = byte(int8(ps.nice))
	le.PutUint64(b[8:], ps.flags)
	le.PutUint32(b[16:], statusFirst(status, "Uid"))
	le.PutUint32(b[20:], statusFirst(status, "Gid"))
	le.PutUint32(b[24:], uint32(pid))
	le.PutUint32(b[28:], uint32(ps.ppid))
	le.PutUint32(b[32:], uint32(ps.pgrp))
	le.PutUint32(b[36:], uint32(ps.sid))
	copy(b[40:40+15], ps.comm) // pr_fname[16], NUL-terminated
	args := make([]byte, 0, 80)
	for _, c := range cmdline {
		if len(args) == 79 {
			break
		}
		if c == 0 {
			c = ' '
		}
		args = append(args, c)
	}
	copy(b[56:56+79], strings.TrimRight(string(args), " "))
	return b
}

// siginfo is the NT_SIGINFO of the first thread: the caller's siginfo_t
// when it has one, else one with only si_signo set.
func siginfo(th *Thread) []byte {
	b := make([]byte, siginfoSize)
	if len(th.Siginfo) > 0 {
		copy(b, th.Siginfo)
		return b
	}
	le.PutUint32(b, uint32(th.Signal))
	return b
}

// fileNote builds NT_FILE: count, page size, then (start, end, file
// offset in pages) per file-backed mapping, then their names.
func fileNote(maps []mapping, pageSize uint64) []byte {
	var files []*mapping
	for i := range maps {
		if maps[i].fileBacked() {
			files = append(files, &maps[i])
		}
	}
	b := make([]byte, 16+24*len(files))
	le.PutUint64(b, uint64(len(files)))
	le.PutUint64(b[8:], pageSize)
	for i, m := range files {
		o := 16 + 24*i
		le.PutUint64(b[o:], m.start)
		le.PutUint64(b[o+8:], m.end)
		le.PutUint64(b[o+16:], m.offset/pageSize)
	}
	for _, m := range files {
		b = append(b, m.path...)
		b = append(b, 0)
	}
	return b
}

// buildNotes gathers everything the PT_NOTE segment holds, in the order
// the kernel writes it: the first thread's NT_PRSTATUS, the process-wide
// notes, the first thread's NT_FPREGSET, then each other thread's
// NT_PRSTATUS and NT_FPREGSET (debuggers attach a register note to the
// NT_PRSTATUS before it).
func buildNotes(p *Process, taskDir string, ps procStat, status map[string]string, maps []mapping, pageSize uint64) ([]byte, error) {
	var n noteBuf
	proc := fmt.Sprintf("/proc/%d", p.PID)
	cmdline, err := os.ReadFile(proc + "/cmdline")
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", p.PID, err)
	}
	auxv, err := os.ReadFile(taskDir + "/auxv")
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", p.PID, err)
	}
	for i := range p.Threads {
		th := &p.Threads[i]
		if th.FPRegs != nil && len(th.FPRegs) != fxsaveSize {
			return nil, fmt.Errorf("thread %d: FPRegs has %d bytes, want %d (FXSAVE area) or nil", th.TID, len(th.FPRegs), fxsaveSize)
		}
		if len(th.Siginfo) > siginfoSize {
			return nil, fmt.Errorf("thread %d: Siginfo has %d bytes, at most %d", th.TID, len(th.Siginfo), siginfoSize)
		}
		dir := fmt.Sprintf("%s/task/%d", proc, th.TID)
		tstatus, err := readStatus(dir + "/status")
		if err != nil {
			return nil, fmt.Errorf("thread %d of process %d: %w", th.TID, p.PID, err)
		}
		// the leader reports the whole group's times, as the kernel does
		ts := ps
		if th.TID != p.PID {
			if ts, err = readStat(dir + "/stat"); err != nil {
				return nil, fmt.Errorf("thread %d of process %d: %w", th.TID, p.PID, err)
			}
		}
		// The kernel writes the dump's signal in every thread's
		// NT_PRSTATUS, and gdb reports the one of the last note.
		sig := th.Signal
		if sig == 0 {
			sig = p.Threads[0].Signal
		}
		n.add("CORE", ntPRSTATUS, prstatus(th, sig, ts, ps, tstatus))
		if i == 0 {
			n.add("CORE", ntPRPSINFO, prpsinfo(p.PID, ps, status, cmdline))
			if th.Signal != 0 || len(th.Siginfo) > 0 {
				n.add("CORE", ntSIGINFO, siginfo(th))
			}
			n.add("CORE", ntAUXV, auxv)
			n.add("CORE", ntFILE, fileNote(maps, pageSize))
		}
		if th.FPRegs != nil {
			n.add("CORE", ntFPREGSET, th.FPRegs)
		}
	}
	return n.b, nil
}
