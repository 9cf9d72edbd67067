package xen

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The Linux driver interfaces (include/uapi/xen/privcmd.h, evtchn.h).
const (
	ioctlPrivcmdHypercall   = 0x00305000 // _IOC(_IOC_NONE, 'P', 0, 48)
	ioctlPrivcmdMmapBatchV2 = 0x00205004 // _IOC(_IOC_NONE, 'P', 4, 32)
	ioctlEvtchnBindVirq     = 0x00044500 // _IOC(_IOC_NONE, 'E', 0, 4)
	ioctlEvtchnUnbind       = 0x00044503 // _IOC(_IOC_NONE, 'E', 3, 4)
)

// Hypercalls and the domctl interface of Xen 4.17 (xen/include/public).
const (
	hypercallDomctl = 36

	domctlInterfaceVersion = 0x15

	domctlPauseDomain      = 3
	domctlUnpauseDomain    = 4
	domctlGetDomainInfo    = 5
	domctlSetVCPUContext   = 12
	domctlGetVCPUContext   = 13
	domctlSetDebugging     = 18
	domctlGetAddressSize   = 36
	domctlGdbsxPauseVCPU   = 1001
	domctlGdbsxUnpauseVCPU = 1002
	domctlGdbsxDomStatus   = 1003

	domctlSize = 144 // struct xen_domctl

	virqDebugger = 6
)

// getdomaininfo flags
const (
	dominfDying    = 1 << 0
	dominfHVM      = 1 << 1
	dominfShutdown = 1 << 2
	dominfPaused   = 1 << 3
	dominfDebugged = 1 << 6
)

// Hypervisor is dom0's handle on Xen: the privcmd device, with a locked
// buffer for hypercall arguments (Xen reads and writes them through the
// caller's virtual addresses: the pages must stay present).
type Hypervisor struct {
	mu      sync.Mutex // one hypercall at a time through buf
	privcmd *os.File
	buf     []byte // domctl at 0, a vCPU context at 4096
}

// OpenHypervisor opens /dev/xen/privcmd; dom0 (root) only.
func OpenHypervisor() (*Hypervisor, error) {
	f, err := os.OpenFile("/dev/xen/privcmd", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("xen: no /dev/xen/privcmd: not in a Xen dom0 (or xen-privcmd is not loaded: modprobe xen-privcmd)")
		}
		return nil, fmt.Errorf("xen: %w", err)
	}
	h := &Hypervisor{privcmd: f}
	// /dev/xen/hypercall (Linux 4.18+) gives pages Xen may touch at any
	// time; anonymous locked pages do as well for a PV dom0.
	size := 4 * 4096
	if hf, err := os.OpenFile("/dev/xen/hypercall", os.O_RDWR|unix.O_CLOEXEC, 0); err == nil {
		b, err := unix.Mmap(int(hf.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		hf.Close()
		if err == nil {
			h.buf = b
		}
	}
	if h.buf == nil {
		b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_LOCKED)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("xen: hypercall buffer: %w", err)
		}
		h.buf = b
	}
	return h, nil
}

// Close releases the device.
func (h *Hypervisor) Close() error {
	unix.Munmap(h.buf)
	return h.privcmd.Close()
}

func (h *Hypervisor) hypercall(op uint64, args ...uint64) (uintptr, error) {
	var hc struct {
		op   uint64
		args [5]uint64
	}
	hc.op = op
	copy(hc.args[:], args)
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, h.privcmd.Fd(), ioctlPrivcmdHypercall, uintptr(unsafe.Pointer(&hc)))
	if errno != 0 {
		return 0, errno
	}
	return r, nil
}

var domctlNames = map[uint32]string{
	domctlPauseDomain: "pausedomain", domctlUnpauseDomain: "unpausedomain",
	domctlGetDomainInfo: "getdomaininfo", domctlSetVCPUContext: "setvcpucontext",
	domctlGetVCPUContext: "getvcpucontext", domctlSetDebugging: "setdebugging",
	domctlGetAddressSize: "get_address_size", domctlGdbsxPauseVCPU: "gdbsx_pausevcpu",
	domctlGdbsxUnpauseVCPU: "gdbsx_unpausevcpu", domctlGdbsxDomStatus: "gdbsx_domstatus",
}

// domctl runs one domain control: fill writes the union (u, 128 bytes),
// read sees it afterwards; both run under the buffer's lock.
func (h *Hypervisor) domctl(cmd uint32, dom uint16, fill, read func(u []byte)) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	d := h.buf[:domctlSize]
	clear(d)
	binary.LittleEndian.PutUint32(d[0:], cmd)
	binary.LittleEndian.PutUint32(d[4:], domctlInterfaceVersion)
	binary.LittleEndian.PutUint16(d[8:], dom)
	if fill != nil {
		fill(d[16:])
	}
	if _, err := h.hypercall(hypercallDomctl, uint64(uintptr(unsafe.Pointer(&d[0])))); err != nil {
		name := domctlNames[cmd]
		if name == "" {
			name = fmt.Sprint(cmd)
		}
		if errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("xen: domain %d: %w", dom, ErrNoDomain)
		}
		if errors.Is(err, unix.EACCES) {
			return fmt.Errorf("xen: domctl %s: %w (not dom0, or a hypervisor whose domctl version is not 0x%x, Xen 4.17's)", name, err, domctlInterfaceVersion)
		}
		return fmt.Errorf("xen: domctl %s on domain %d: %w", name, dom, err)
	}
	if read != nil {
		read(d[16:])
	}
	return nil
}

// ErrNoDomain is a domain that does not exist (any more).
var ErrNoDomain = errors.New("no such domain")

// DomainInfo is what getdomaininfo says of a domain.
type DomainInfo struct {
	Flags     uint32
	MaxVCPUID uint32
	Online    uint32
	Handle    [16]byte // the domain's UUID: a domid can be used again
}

func (i DomainInfo) Dying() bool    { return i.Flags&(dominfDying|dominfShutdown) != 0 }
func (i DomainInfo) Paused() bool   { return i.Flags&dominfPaused != 0 }
func (i DomainInfo) HVM() bool      { return i.Flags&dominfHVM != 0 }
func (i DomainInfo) Debugged() bool { return i.Flags&dominfDebugged != 0 }

// Info reads a domain's state.
func (h *Hypervisor) Info(dom uint16) (DomainInfo, error) {
	var info DomainInfo
	other := false
	err := h.domctl(domctlGetDomainInfo, dom, nil, func(u []byte) {
		// older hypervisors answer with the next domain up
		other = binary.LittleEndian.Uint16(u[0:]) != dom
		info.Flags = binary.LittleEndian.Uint32(u[4:])
		info.Online = binary.LittleEndian.Uint32(u[64:])
		info.MaxVCPUID = binary.LittleEndian.Uint32(u[68:])
		copy(info.Handle[:], u[76:92])
	})
	if err == nil && other {
		return DomainInfo{}, fmt.Errorf("xen: domain %d: %w", dom, ErrNoDomain)
	}
	return info, err
}

// Pause and Unpause count: each Pause needs its Unpause.
func (h *Hypervisor) Pause(dom uint16) error   { return h.domctl(domctlPauseDomain, dom, nil, nil) }
func (h *Hypervisor) Unpause(dom uint16) error { return h.domctl(domctlUnpauseDomain, dom, nil, nil) }

// SetDebugging turns the domain's debugging mode on or off: on, a PV
// kernel's int3 and debug traps pause it instead of reaching the guest.
func (h *Hypervisor) SetDebugging(dom uint16, on bool) error {
	return h.domctl(domctlSetDebugging, dom, func(u []byte) {
		if on {
			u[0] = 1
		}
	}, nil)
}

// AddressSize is the guest's width in bits (64 or 32).
func (h *Hypervisor) AddressSize(dom uint16) (int, error) {
	var n int
	err := h.domctl(domctlGetAddressSize, dom, nil, func(u []byte) { n = int(binary.LittleEndian.Uint32(u)) })
	return n, err
}

// PauseVCPU and UnpauseVCPU hold one vCPU of a paused domain (gdbsx's
// domctls: a hypervisor built with CONFIG_GDBSX).
func (h *Hypervisor) PauseVCPU(dom uint16, vcpu int) error {
	return h.domctl(domctlGdbsxPauseVCPU, dom, func(u []byte) { binary.LittleEndian.PutUint32(u, uint32(vcpu)) }, nil)
}

func (h *Hypervisor) UnpauseVCPU(dom uint16, vcpu int) error {
	return h.domctl(domctlGdbsxUnpauseVCPU, dom, func(u []byte) { binary.LittleEndian.PutUint32(u, uint32(vcpu)) }, nil)
}

// DomStatus reports one vCPU of a paused domain that stopped on an int3
// (Xen's gdbsx event, TRAP_int3 = 3) and clears its event; vcpu is -1
// when none is left. The event must be cleared: while it is set, Xen
// raises no VIRQ_DEBUGGER for that vCPU's debug traps.
func (h *Hypervisor) DomStatus(dom uint16) (vcpu int, ev uint32, err error) {
	vcpu = -1
	err = h.domctl(domctlGdbsxDomStatus, dom, nil, func(u []byte) {
		if id := binary.LittleEndian.Uint32(u[4:]); id != ^uint32(0) {
			vcpu, ev = int(id), binary.LittleEndian.Uint32(u[8:])
		}
	})
	return vcpu, ev, err
}

// GetContext reads a vCPU's context (struct vcpu_guest_context) into ctx.
func (h *Hypervisor) GetContext(dom uint16, vcpu int, ctx *Context) error {
	return h.vcpuContext(domctlGetVCPUContext, dom, vcpu, ctx)
}

// SetContext writes it back; the domain must be paused.
func (h *Hypervisor) SetContext(dom uint16, vcpu int, ctx *Context) error {
	return h.vcpuContext(domctlSetVCPUContext, dom, vcpu, ctx)
}

func (h *Hypervisor) vcpuContext(cmd uint32, dom uint16, vcpu int, ctx *Context) error {
	h.mu.Lock()
	c := h.buf[4096 : 4096+ctxSize]
	if cmd == domctlSetVCPUContext {
		copy(c, ctx[:])
	}
	addr := uint64(uintptr(unsafe.Pointer(&c[0])))
	h.mu.Unlock()
	return h.domctl(cmd, dom, func(u []byte) {
		binary.LittleEndian.PutUint32(u[0:], uint32(vcpu))
		binary.LittleEndian.PutUint64(u[8:], addr)
	}, func([]byte) {
		if cmd == domctlGetVCPUContext {
			copy(ctx[:], c)
		}
	})
}

// MapFrame maps one machine frame of a domain into dom0, read-only or
// read-write. A PV guest's page tables can only be mapped read-only (Xen
// refuses a writable mapping of a page typed as a page table: EBUSY).
func (h *Hypervisor) MapFrame(dom uint16, frame uint64, write bool) ([]byte, error) {
	prot := unix.PROT_READ
	if write {
		prot |= unix.PROT_WRITE
	}
	b, err := unix.Mmap(int(h.privcmd.Fd()), 0, 4096, prot, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("xen: map a frame of domain %d: %w", dom, err)
	}
	mfn := frame
	var ferr int32
	batch := struct {
		num  uint32
		dom  uint16
		_    uint16
		addr uint64
		arr  uintptr
		err  uintptr
	}{num: 1, dom: dom, addr: uint64(uintptr(unsafe.Pointer(&b[0]))), arr: uintptr(unsafe.Pointer(&mfn)), err: uintptr(unsafe.Pointer(&ferr))}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, h.privcmd.Fd(), ioctlPrivcmdMmapBatchV2, uintptr(unsafe.Pointer(&batch)))
	if errno != 0 || ferr != 0 {
		unix.Munmap(b)
		if errno == 0 {
			errno = unix.Errno(-ferr)
		}
		return nil, fmt.Errorf("xen: map frame %#x of domain %d: %w", frame, dom, errno)
	}
	return b, nil
}

// UnmapFrame releases a mapping of MapFrame.
func UnmapFrame(b []byte) { unix.Munmap(b) }

// Events is the VIRQ_DEBUGGER event channel: the hypervisor raises it when
// a debugged domain pauses on a debug trap.
type Events struct {
	f    *os.File
	port uint32
	wake [2]int // a pipe: Kick writes, Wait sees it
}

// BindDebugger binds VIRQ_DEBUGGER on /dev/xen/evtchn.
func BindDebugger() (*Events, error) {
	f, err := os.OpenFile("/dev/xen/evtchn", os.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("xen: %w (is xen-evtchn loaded?)", err)
	}
	virq := uint32(virqDebugger)
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), ioctlEvtchnBindVirq, uintptr(unsafe.Pointer(&virq)))
	if errno != 0 {
		f.Close()
		if errno == unix.EEXIST {
			return nil, fmt.Errorf("xen: VIRQ_DEBUGGER is bound by another dom0 program already (another gprobes daemon?): %w", errno)
		}
		return nil, fmt.Errorf("xen: bind VIRQ_DEBUGGER: %w", errno)
	}
	e := &Events{f: f, port: uint32(r)}
	if err := unix.Pipe2(e.wake[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		f.Close()
		return nil, err
	}
	return e, nil
}

// waitFor blocks until the event fires (true), Kick is called or the
// timeout passes (false).
func (e *Events) waitFor(timeout time.Duration) (bool, error) {
	fds := []unix.PollFd{{Fd: int32(e.f.Fd()), Events: unix.POLLIN}, {Fd: int32(e.wake[0]), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(timeout/time.Millisecond))
		if err == nil && n == 0 {
			return false, nil
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, err
		}
		fired := false
		if fds[0].Revents&unix.POLLIN != 0 {
			var b [64]byte
			n, _ := unix.Read(int(e.f.Fd()), b[:])
			for i := 0; i+4 <= n; i += 4 {
				port := binary.LittleEndian.Uint32(b[i:])
				var u [4]byte
				binary.LittleEndian.PutUint32(u[:], port)
				unix.Write(int(e.f.Fd()), u[:]) // unmask
				fired = true
			}
		}
		if fds[1].Revents&unix.POLLIN != 0 {
			var b [16]byte
			unix.Read(e.wake[0], b[:])
			return fired, nil
		}
		if fired {
			return true, nil
		}
	}
}

// Kick makes Wait return.
func (e *Events) Kick() { unix.Write(e.wake[1], []byte{1}) }

// Close unbinds the channel.
func (e *Events) Close() error {
	port := e.port
	unix.Syscall(unix.SYS_IOCTL, e.f.Fd(), ioctlEvtchnUnbind, uintptr(unsafe.Pointer(&port)))
	unix.Close(e.wake[0])
	unix.Close(e.wake[1])
	return e.f.Close()
}

// MapFrames maps n machine frames of a domain read-only into one range of
// dom0 (one mmap, one ioctl), for reading many frames at once (a dump).
// errs[i] is the frame's own error (0 when mapped); a frame that failed
// reads as whatever the mapping holds there and must not be used.
func (h *Hypervisor) MapFrames(dom uint16, frames []uint64) (b []byte, errs []int32, err error) {
	if len(frames) == 0 {
		return nil, nil, nil
	}
	b, err = unix.Mmap(int(h.privcmd.Fd()), 0, 4096*len(frames), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("xen: map %d frames of domain %d: %w", len(frames), dom, err)
	}
	arr := append([]uint64(nil), frames...)
	errs = make([]int32, len(frames))
	batch := struct {
		num  uint32
		dom  uint16
		_    uint16
		addr uint64
		arr  uintptr
		err  uintptr
	}{num: uint32(len(frames)), dom: dom, addr: uint64(uintptr(unsafe.Pointer(&b[0]))), arr: uintptr(unsafe.Pointer(&arr[0])), err: uintptr(unsafe.Pointer(&errs[0]))}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, h.privcmd.Fd(), ioctlPrivcmdMmapBatchV2, uintptr(unsafe.Pointer(&batch)))
	if errno != 0 && errno != unix.ENOENT {
		unix.Munmap(b)
		return nil, nil, fmt.Errorf("xen: map %d frames of domain %d: %w", len(frames), dom, errno)
	}
	return b, errs, nil
}
