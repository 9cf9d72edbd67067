//go:build linux

package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// kmem reads kernel memory (the live kernel text, for a probe's opcode
// check and instruction boundary) with a BPF_PROG_TYPE_SYSCALL program
// run on demand (BPF_PROG_TEST_RUN): bpf_probe_read_kernel into a map
// value. It needs no /proc/kcore, which many kernels (this machine's
// among them) do not have, and reads only what the eBPF programs gprobes
// loads may read anyway.
type kmem struct {
	mu   sync.Mutex
	buf  *ebpf.Map
	prog *ebpf.Program
}

// kmemChunk is the most one run reads.
const kmemChunk = 4096

func newKmem() (*kmem, error) {
	buf, err := ebpf.NewMap(&ebpf.MapSpec{Name: "gp_kmem", Type: ebpf.Array, KeySize: 4, ValueSize: kmemChunk, MaxEntries: 1})
	if err != nil {
		return nil, err
	}
	// ctx: u64 address, u32 length
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "gp_kmem", Type: ebpf.Syscall, License: "GPL", Flags: unix.BPF_F_SLEEPABLE,
		Instructions: asm.Instructions{
			asm.Mov.Reg(asm.R6, asm.R1),
			asm.LoadMapValue(asm.R1, buf.FD(), 0),
			asm.LoadMem(asm.R2, asm.R6, 8, asm.Word),
			asm.JGT.Imm(asm.R2, kmemChunk, "big"),
			asm.LoadMem(asm.R3, asm.R6, 0, asm.DWord),
			asm.FnProbeReadKernel.Call(),
			asm.Return(),
			asm.Mov.Imm(asm.R0, -int32(unix.E2BIG)).WithSymbol("big"),
			asm.Return(),
		},
	})
	if err != nil {
		buf.Close()
		return nil, err
	}
	return &kmem{buf: buf, prog: prog}, nil
}

// read fills p from kernel address addr.
func (k *kmem) read(addr uint64, p []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for len(p) > 0 {
		n := min(len(p), kmemChunk)
		ctx := make([]byte, 16)
		binary.LittleEndian.PutUint64(ctx, addr)
		binary.LittleEndian.PutUint32(ctx[8:], uint32(n))
		ret, err := k.prog.Run(&ebpf.RunOptions{Context: ctx})
		if err != nil {
			return err
		}
		if int32(ret) < 0 {
			return fmt.Errorf("kernel memory at %#x: %w", addr, unix.Errno(-int32(ret)))
		}
		v, err := k.buf.LookupBytes(uint32(0))
		if err != nil {
			return err
		}
		if len(v) < n {
			return errors.New("kernel memory: short map value")
		}
		copy(p, v[:n])
		p, addr = p[n:], addr+uint64(n)
	}
	return nil
}

func (k *kmem) close() {
	k.prog.Close()
	k.buf.Close()
}

// currentTask is the address of the calling thread's task_struct: a
// BPF_PROG_TYPE_SYSCALL program run (BPF_PROG_TEST_RUN runs it in the
// caller's context) storing bpf_get_current_task() in the map. The
// program is loaded for the call and closed after it: a watch probe's
// address needs it once, and the programs gprobes holds stay those of
// its probes and of read.
func (k *kmem) currentTask() (uint64, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "gp_ktask", Type: ebpf.Syscall, License: "GPL", Flags: unix.BPF_F_SLEEPABLE,
		Instructions: asm.Instructions{
			asm.FnGetCurrentTask.Call(),
			asm.LoadMapValue(asm.R1, k.buf.FD(), 0),
			asm.StoreMem(asm.R1, 0, asm.R0, asm.DWord),
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		},
	})
	if err != nil {
		return 0, fmt.Errorf("a program to find gprobes' own task: %w", err)
	}
	defer prog.Close()
	if _, err := prog.Run(&ebpf.RunOptions{Context: make([]byte, 16)}); err != nil {
		return 0, err
	}
	v, err := k.buf.LookupBytes(uint32(0))
	if err != nil {
		return 0, err
	}
	if len(v) < 8 {
		return 0, errors.New("kernel memory: short map value")
	}
	return binary.LittleEndian.Uint64(v), nil
}
