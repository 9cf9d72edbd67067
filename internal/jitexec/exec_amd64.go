//go:build linux && amd64

package jitexec

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

func call(fn, frame, scratch, stack uintptr) uint32
func segments() (cs, ss, ds, es, fs, gs uint16)
func sigtrampAddr() uintptr
func sigreturnAddr() uintptr

// StackSize is the size of the stack the code runs on.
const StackSize = 256 << 10

// Code is machine code in an executable mapping, with a stack to run it
// on. A Code runs one call at a time.
type Code struct {
	text  []byte
	stack []byte
	fix   []uint32 // At, Handler pairs
}

// Load copies b into a new read+exec mapping. fixups lists the code's
// memory-access instructions and their fault handlers, as offsets
// (At, Handler): Call resumes a fault at At at its Handler.
func Load(b []byte, fixups [][2]uint32) (*Code, error) {
	size := (len(b) + 4095) &^ 4095
	if size == 0 {
		size = 4096
	}
	text, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return nil, err
	}
	copy(text, b)
	if err := unix.Mprotect(text, unix.PROT_READ|unix.PROT_EXEC); err != nil {
		unix.Munmap(text)
		return nil, err
	}
	stack, err := unix.Mmap(-1, 0, StackSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		unix.Munmap(text)
		return nil, err
	}
	c := &Code{text: text, stack: stack}
	for _, f := range fixups {
		if int(f[0]) >= len(b) || int(f[1]) >= len(b) {
			c.Close()
			return nil, fmt.Errorf("jitexec: fixup %#x -> %#x outside the code (%d bytes)", f[0], f[1], len(b))
		}
		c.fix = append(c.fix, f[0], f[1])
	}
	return c, nil
}

// Addr is the address of the code's first byte.
func (c *Code) Addr() uintptr { return uintptr(unsafe.Pointer(&c.text[0])) }

// StackTop is the rsp the code is called with (before the call pushes
// its return address).
func (c *Code) StackTop() uintptr {
	return uintptr(unsafe.Pointer(&c.stack[0])) + StackSize - 64
}

// Call runs the code from its first byte with rbp = frame and rbx =
// scratch and returns eax. The fault handling of Catch applies if it
// was installed.
func (c *Code) Call(frame, scratch uintptr) uint32 {
	return c.CallAt(0, frame, scratch)
}

// CallAt runs the code from offset off.
func (c *Code) CallAt(off int, frame, scratch uintptr) uint32 {
	mu.Lock()
	defer mu.Unlock()
	if catching {
		fixN = 0
		codeLo = c.Addr()
		codeHi = codeLo + uintptr(len(c.text))
		if len(c.fix) > 0 {
			fixTab = uintptr(unsafe.Pointer(&c.fix[0]))
		}
		fixN = uintptr(len(c.fix) / 2)
	}
	r := call(c.Addr()+uintptr(off), frame, scratch, uintptr(unsafe.Pointer(&c.stack[0]))+StackSize)
	if catching {
		codeLo, codeHi, fixN = 0, 0, 0
	}
	return r
}

// Stack is a stack for CallOn: one per goroutine calling at once.
type Stack struct{ mem []byte }

// NewStack maps a stack of StackSize bytes.
func NewStack() (*Stack, error) {
	m, err := unix.Mmap(-1, 0, StackSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return nil, err
	}
	return &Stack{m}, nil
}

// Close unmaps the stack.
func (s *Stack) Close() error { return unix.Munmap(s.mem) }

// CallOn runs the code from its first byte on stack s, without the fault
// handling of Catch (a fault is the Go runtime's, and fatal): any number
// of goroutines may run the same code at once, each with its own stack,
// frame and scratch area.
func (c *Code) CallOn(s *Stack, frame, scratch uintptr) uint32 {
	return call(c.Addr(), frame, scratch, uintptr(unsafe.Pointer(&s.mem[0]))+StackSize)
}

// Close unmaps the code and its stack.
func (c *Code) Close() error {
	err := unix.Munmap(c.text)
	if e := unix.Munmap(c.stack); err == nil {
		err = e
	}
	return err
}

// Segments returns the segment selectors of the calling thread.
func Segments() (cs, ss, ds, es, fs, gs uint16) { return segments() }

// What the signal handler reads and writes (sigtramp in exec_amd64.s).
var (
	mu               sync.Mutex
	catching         bool
	codeLo, codeHi   uintptr
	fixTab, fixN     uintptr
	oldSEGV, oldBUS  uintptr
	caught, lastAddr uint64
	lastSig          uint32
)

// sigaction is the kernel's struct sigaction on x86-64.
type sigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

const (
	saSiginfo  = 0x4
	saOnstack  = 0x08000000
	saRestorer = 0x04000000
	saRestart  = 0x10000000
)

// Catch installs the fault handler for SIGSEGV and SIGBUS for the rest
// of the process's life: a fault at a fixup instruction of the Code
// being called resumes at its handler, as the tracer makes it for a pad;
// every other SIGSEGV and SIGBUS goes on to the Go runtime's handler,
// which was installed before. Go only ever installs these handlers at
// start-up, so nothing takes them back.
func Catch() error {
	mu.Lock()
	defer mu.Unlock()
	if catching {
		return nil
	}
	for _, s := range []struct {
		sig uintptr
		old *uintptr
	}{{uintptr(unix.SIGSEGV), &oldSEGV}, {uintptr(unix.SIGBUS), &oldBUS}} {
		var old sigaction
		if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, s.sig, 0, uintptr(unsafe.Pointer(&old)), 8, 0, 0); e != 0 {
			return fmt.Errorf("jitexec: rt_sigaction: %v", e)
		}
		if old.handler <= 1 || old.flags&saSiginfo == 0 {
			return fmt.Errorf("jitexec: signal %d has no Go handler to chain to (%#x, flags %#x)", s.sig, old.handler, old.flags)
		}
		*s.old = old.handler
		nw := sigaction{
			handler:  sigtrampAddr(),
			flags:    saSiginfo | saOnstack | saRestorer | saRestart,
			restorer: sigreturnAddr(),
			mask:     old.mask,
		}
		if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, s.sig, uintptr(unsafe.Pointer(&nw)), 0, 8, 0, 0); e != 0 {
			return fmt.Errorf("jitexec: rt_sigaction: %v", e)
		}
	}
	catching = true
	return nil
}

// Caught is how many faults the handler turned into fixups so far, and
// the signal and address (si_addr) of the last one.
func Caught() (n uint64, sig int, addr uint64) {
	return atomic.LoadUint64(&caught), int(atomic.LoadUint32(&lastSig)), atomic.LoadUint64(&lastAddr)
}
