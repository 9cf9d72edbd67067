package ptrace

import (
	"encoding/binary"
	"fmt"
)

// Seccomp filters, evaluated before gprobes makes a thread run a system
// call (InjectSyscall: mmap for out-of-line slots and pad areas, openat,
// mmap and close for the shared memory): a filter that kills on mmap or
// openat would kill the process (docs/engine.md, "Never harm the
// target"). A filter is a classic BPF program over struct seccomp_data;
// this is the kernel's interpreter of it (kernel/bpf/core.c's
// ___bpf_prog_run for the converted program, net/core/filter.c for the
// classic semantics), restricted to what seccomp accepts
// (seccomp_check_filter).

// bpfInsn is a struct sock_filter.
type bpfInsn struct {
	Code   uint16
	Jt, Jf uint8
	K      uint32
}

// seccompData is struct seccomp_data.
type seccompData struct {
	Nr   int32
	Arch uint32
	IP   uint64
	Args [6]uint64
}

// auditArchX86_64 is AUDIT_ARCH_X86_64: what a 64-bit syscall instruction
// reports.
const auditArchX86_64 = 0xc000003e

// Seccomp return actions (SECCOMP_RET_*), the upper 16 bits.
const (
	secKillProcess = 0x80000000
	secKillThread  = 0x00000000
	secTrap        = 0x00030000
	secErrno       = 0x00050000
	secUserNotif   = 0x7fc00000
	secTrace       = 0x7ff00000
	secLog         = 0x7ffc0000
	secAllow       = 0x7fff0000
	secActionFull  = 0xffff0000
)

func (d *seccompData) bytes() [64]byte {
	var b [64]byte
	binary.LittleEndian.PutUint32(b[0:], uint32(d.Nr))
	binary.LittleEndian.PutUint32(b[4:], d.Arch)
	binary.LittleEndian.PutUint64(b[8:], d.IP)
	for i, a := range d.Args {
		binary.LittleEndian.PutUint64(b[16+8*i:], a)
	}
	return b
}

// runFilter runs one filter on d and returns its 32-bit result. A
// program that is not valid for seccomp (the kernel would not have loaded
// it) returns an error.
func runFilter(prog []bpfInsn, d *seccompData) (uint32, error) {
	data := d.bytes()
	var a, x uint32
	var mem [16]uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		// loads
		case 0x20: // ld [k]
			if in.K%4 != 0 || in.K+4 > 64 {
				return 0, fmt.Errorf("instruction %d loads seccomp_data at %d", pc, in.K)
			}
			a = binary.LittleEndian.Uint32(data[in.K:])
		case 0x80: // ld len
			a = 64
		case 0x81: // ldx len
			x = 64
		case 0x00: // ld #k
			a = in.K
		case 0x01: // ldx #k
			x = in.K
		case 0x60: // ld M[k]
			if in.K >= 16 {
				return 0, fmt.Errorf("instruction %d: scratch word %d", pc, in.K)
			}
			a = mem[in.K]
		case 0x61: // ldx M[k]
			if in.K >= 16 {
				return 0, fmt.Errorf("instruction %d: scratch word %d", pc, in.K)
			}
			x = mem[in.K]
		case 0x02: // st M[k]
			if in.K >= 16 {
				return 0, fmt.Errorf("instruction %d: scratch word %d", pc, in.K)
			}
			mem[in.K] = a
		case 0x03: // stx M[k]
			if in.K >= 16 {
				return 0, fmt.Errorf("instruction %d: scratch word %d", pc, in.K)
			}
			mem[in.K] = x
		// returns
		case 0x06: // ret #k
			return in.K, nil
		case 0x16: // ret a
			return a, nil
		// misc
		case 0x07: // tax
			x = a
		case 0x87: // txa
			a = x
		// jumps (forward only)
		case 0x05: // ja
			pc += int(in.K)
		case 0x15, 0x1d, 0x25, 0x2d, 0x35, 0x3d, 0x45, 0x4d:
			v := in.K
			if in.Code&0x08 != 0 {
				v = x
			}
			var cond bool
			switch in.Code &^ 0x08 {
			case 0x15:
				cond = a == v
			case 0x25:
				cond = a > v
			case 0x35:
				cond = a >= v
			case 0x45:
				cond = a&v != 0
			}
			if cond {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		default:
			if in.Code&0x07 != 0x04 {
				return 0, fmt.Errorf("instruction %d: code %#x is not one seccomp accepts", pc, in.Code)
			}
			v := in.K
			if in.Code&0x08 != 0 {
				v = x
			}
			switch in.Code &^ 0x08 {
			case 0x04:
				a += v
			case 0x14:
				a -= v
			case 0x24:
				a *= v
			case 0x34:
				if v == 0 {
					return 0, nil // the kernel's classic BPF: division by zero returns 0
				}
				a /= v
			case 0x94:
				if v == 0 {
					return 0, nil
				}
				a %= v
			case 0x44:
				a |= v
			case 0x54:
				a &= v
			case 0xa4:
				a ^= v
			case 0x64:
				a <<= v & 31 // as the kernel's interpreter
			case 0x74:
				a >>= v & 31
			case 0x84:
				a = -a
			default:
				return 0, fmt.Errorf("instruction %d: code %#x is not one seccomp accepts", pc, in.Code)
			}
		}
	}
	return 0, fmt.Errorf("the filter runs past its end")
}

// seccompVerdict combines the results of every filter of a thread as the
// kernel does: the action of highest precedence (the lowest as a signed
// 32-bit value) wins; an unknown action counts as KILL_PROCESS.
func seccompVerdict(filters [][]bpfInsn, d *seccompData) (uint32, error) {
	best := uint32(secAllow)
	for i, f := range filters {
		r, err := runFilter(f, d)
		if err != nil {
			return 0, fmt.Errorf("seccomp filter %d: %w", i, err)
		}
		switch r & secActionFull {
		case secKillProcess, secKillThread, secTrap, secErrno, secUserNotif, secTrace, secLog, secAllow:
		default:
			r = secKillProcess
		}
		if int32(r&secActionFull) < int32(best&secActionFull) {
			best = r
		}
	}
	return best, nil
}

// seccompAction names a result.
func seccompAction(r uint32) string {
	switch r & secActionFull {
	case secKillProcess:
		return "KILL_PROCESS"
	case secKillThread:
		return "KILL_THREAD"
	case secTrap:
		return "TRAP (SIGSYS)"
	case secErrno:
		return fmt.Sprintf("ERRNO (%d)", r&0xffff)
	case secUserNotif:
		return "USER_NOTIF (its supervisor would see it)"
	case secTrace:
		return "TRACE"
	case secLog:
		return "LOG"
	case secAllow:
		return "ALLOW"
	}
	return fmt.Sprintf("%#x", r)
}
