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
	hypercallMulticall = 13
	hypercallDomctl    = 36

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
	buf     []byte // domctl at 0, a vCPU context at 4096; a batch's layout (Batch)
	hcdev   bool   // buf is a mapping of /dev/xen/hypercall
	counts  Counts
}

// Counts are what a Hypervisor has asked of Xen: hypercalls (each a
// privcmd ioctl, a multicall counting once, and each frame mapping, whose
// ioctl makes the kernel update dom0's page tables through Xen), domctls
// (each domain control, inside a multicall or not) and multicalls.
type Counts struct {
	Hypercalls, Domctls, Multicalls, FrameMaps uint64
}

// Counts reads the counters.
func (h *Hypervisor) Counts() Counts {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts
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
	if err := h.grow(4 * 4096); err != nil {
		f.Close()
		return nil, err
	}
	return h, nil
}

// grow gives the hypercall buffer at least size bytes (under h.mu, or
// before h is shared). /dev/xen/hypercall (Linux 4.18+) gives pages Xen
// may touch at any time; anonymous locked pages do as well for a PV dom0.
func (h *Hypervisor) grow(size int) error {
	if len(h.buf) >= size {
		return nil
	}
	size = (size + 4095) &^ 4095
	var buf []byte
	hcdev := false
	if hf, err := os.OpenFile("/dev/xen/hypercall", os.O_RDWR|unix.O_CLOEXEC, 0); err == nil {
		b, err := unix.Mmap(int(hf.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		hf.Close()
		if err == nil {
			buf, hcdev = b, true
		}
	}
	if buf == nil {
		b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_LOCKED)
		if err != nil {
			return fmt.Errorf("xen: hypercall buffer: %w", err)
		}
		buf = b
	}
	if h.buf != nil {
		unix.Munmap(h.buf)
	}
	h.buf, h.hcdev = buf, hcdev
	return nil
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
	h.counts.Hypercalls++
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
	putDomctl(d, cmd, dom, fill)
	h.counts.Domctls++
	if _, err := h.hypercall(hypercallDomctl, uint64(uintptr(unsafe.Pointer(&d[0])))); err != nil {
		return domctlError(cmd, dom, err)
	}
	if read != nil {
		read(d[16:])
	}
	return nil
}

func putDomctl(d []byte, cmd uint32, dom uint16, fill func(u []byte)) {
	clear(d)
	binary.LittleEndian.PutUint32(d[0:], cmd)
	binary.LittleEndian.PutUint32(d[4:], domctlInterfaceVersion)
	binary.LittleEndian.PutUint16(d[8:], dom)
	if fill != nil {
		fill(d[16:])
	}
}

func domctlError(cmd uint32, dom uint16, err error) error {
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

func errnoOf(err error) unix.Errno {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return unix.EIO
}

// Call is one domain control of a Batch. Ctx, for getvcpucontext and
// setvcpucontext, is the context read or written (Fill then writes the
// vCPU number; the batch puts the context's address in).
type Call struct {
	Cmd  uint32
	Dom  uint16
	Fill func(u []byte) // writes the union
	Read func(u []byte) // sees it after the call succeeded
	Ctx  *Context
	Err  error // the call's own result
}

const multicallEntrySize = 64 // struct multicall_entry: op, result, args[6]

// Batch runs domain controls in order in one hypercall, a multicall
// (__HYPERVISOR_multicall, whose entries are domctls): Xen runs every
// entry whatever the others' results, and each entry's result is its
// Call's Err. One call alone is a plain domctl. The error returned is the
// multicall's own (then no Err is meaningful).
func (h *Hypervisor) Batch(calls []Call) error {
	if len(calls) == 0 {
		return nil
	}
	if len(calls) == 1 && calls[0].Ctx == nil {
		c := &calls[0]
		c.Err = h.domctl(c.Cmd, c.Dom, c.Fill, c.Read)
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(calls)
	if err := h.grow(batchSize(calls)); err != nil {
		return err
	}
	base := uint64(uintptr(unsafe.Pointer(&h.buf[0])))
	packBatch(h.buf, base, calls)
	h.counts.Domctls += uint64(n)
	if n == 1 {
		// one domctl needs no multicall
		r := uint64(0)
		if _, err := h.hypercall(hypercallDomctl, base+uint64(n*multicallEntrySize)); err != nil {
			r = uint64(-int64(errnoOf(err)))
		}
		binary.LittleEndian.PutUint64(h.buf[8:], r)
	} else {
		h.counts.Multicalls++
		if _, err := h.hypercall(hypercallMulticall, base, uint64(n)); err != nil {
			return fmt.Errorf("xen: multicall of %d domctls: %w", n, err)
		}
	}
	unpackBatch(h.buf, calls)
	return nil
}

// A batch in the hypercall buffer: the multicall entries, then one
// struct xen_domctl per call, then the contexts of the calls that have
// one.
func batchSize(calls []Call) int {
	size := len(calls) * (multicallEntrySize + domctlSize)
	for _, c := range calls {
		if c.Ctx != nil {
			size += ctxSize
		}
	}
	return size
}

// packBatch lays calls out in buf, which Xen sees at base.
func packBatch(buf []byte, base uint64, calls []Call) {
	doms := len(calls) * multicallEntrySize
	at := doms + len(calls)*domctlSize
	for i := range calls {
		c := &calls[i]
		e := buf[i*multicallEntrySize : (i+1)*multicallEntrySize]
		d := buf[doms+i*domctlSize : doms+(i+1)*domctlSize]
		putDomctl(d, c.Cmd, c.Dom, c.Fill)
		if c.Ctx != nil {
			if c.Cmd == domctlSetVCPUContext {
				copy(buf[at:at+ctxSize], c.Ctx[:])
			}
			binary.LittleEndian.PutUint64(d[16+8:], base+uint64(at)) // vcpucontext.ctxt
			at += ctxSize
		}
		clear(e)
		binary.LittleEndian.PutUint64(e[0:], hypercallDomctl)
		binary.LittleEndian.PutUint64(e[16:], base+uint64(doms+i*domctlSize))
	}
}

// unpackBatch gives each call its result, what it read and its context.
func unpackBatch(buf []byte, calls []Call) {
	doms := len(calls) * multicallEntrySize
	at := doms + len(calls)*domctlSize
	for i := range calls {
		c := &calls[i]
		c.Err = nil
		if r := int64(binary.LittleEndian.Uint64(buf[i*multicallEntrySize+8:])); r < 0 {
			c.Err = domctlError(c.Cmd, c.Dom, unix.Errno(-r))
		}
		d := buf[doms+i*domctlSize : doms+(i+1)*domctlSize]
		if c.Err == nil && c.Read != nil {
			c.Read(d[16:])
		}
		if c.Ctx != nil {
			if c.Err == nil && c.Cmd == domctlGetVCPUContext {
				copy(c.Ctx[:], buf[at:at+ctxSize])
			}
			at += ctxSize
		}
	}
}

// ErrNoDomain is a domain that does not exist (any more).
var ErrNoDomain = errors.New("no such domain")

// DomainInfo is what getdomaininfo says of a domain.
type DomainInfo struct {
	Flags     uint32
	MaxVCPUID uint32
	Online    uint32
	Handle    [16]byte // the domain's UUID: a domid can be used again
	other     bool     // the answer was of another domain
}

func (i DomainInfo) Dying() bool    { return i.Flags&(dominfDying|dominfShutdown) != 0 }
func (i DomainInfo) Paused() bool   { return i.Flags&dominfPaused != 0 }
func (i DomainInfo) HVM() bool      { return i.Flags&dominfHVM != 0 }
func (i DomainInfo) Debugged() bool { return i.Flags&dominfDebugged != 0 }

// Info reads a domain's state.
func (h *Hypervisor) Info(dom uint16) (DomainInfo, error) {
	var info DomainInfo
	calls := []Call{infoCall(dom, &info)}
	if err := h.Batch(calls); err != nil {
		return DomainInfo{}, err
	}
	return info, infoErr(dom, calls[0], info)
}

// infoCall is a getdomaininfo for a Batch; infoErr its error.
func infoCall(dom uint16, info *DomainInfo) Call {
	return Call{Cmd: domctlGetDomainInfo, Dom: dom, Read: func(u []byte) {
		// older hypervisors answer with the next domain up
		info.other = binary.LittleEndian.Uint16(u[0:]) != dom
		info.Flags = binary.LittleEndian.Uint32(u[4:])
		info.Online = binary.LittleEndian.Uint32(u[64:])
		info.MaxVCPUID = binary.LittleEndian.Uint32(u[68:])
		copy(info.Handle[:], u[76:92])
	}}
}

func infoErr(dom uint16, c Call, info DomainInfo) error {
	if c.Err == nil && info.other {
		return fmt.Errorf("xen: domain %d: %w", dom, ErrNoDomain)
	}
	return c.Err
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
	calls := []Call{statusCall(dom, &vcpu, &ev)}
	if err := h.Batch(calls); err != nil {
		return -1, 0, err
	}
	return vcpu, ev, calls[0].Err
}

// statusCall is a gdbsx_domstatus for a Batch.
func statusCall(dom uint16, vcpu *int, ev *uint32) Call {
	*vcpu = -1
	return Call{Cmd: domctlGdbsxDomStatus, Dom: dom, Read: func(u []byte) {
		if id := binary.LittleEndian.Uint32(u[4:]); id != ^uint32(0) {
			*vcpu, *ev = int(id), binary.LittleEndian.Uint32(u[8:])
		}
	}}
}

// contextCall is a getvcpucontext or setvcpucontext for a Batch.
func contextCall(cmd uint32, dom uint16, vcpu int, ctx *Context) Call {
	return Call{Cmd: cmd, Dom: dom, Ctx: ctx, Fill: func(u []byte) { binary.LittleEndian.PutUint32(u[0:], uint32(vcpu)) }}
}

// domCall is a domctl on the domain alone (pause, unpause) or on one of
// its vCPUs (gdbsx's pause and unpause) for a Batch.
func domCall(cmd uint32, dom uint16, vcpu int) Call {
	c := Call{Cmd: cmd, Dom: dom}
	if vcpu >= 0 {
		c.Fill = func(u []byte) { binary.LittleEndian.PutUint32(u, uint32(vcpu)) }
	}
	return c
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
	calls := []Call{contextCall(cmd, dom, vcpu, ctx)}
	if err := h.Batch(calls); err != nil {
		return err
	}
	return calls[0].Err
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
	h.mu.Lock()
	h.counts.Hypercalls++
	h.counts.FrameMaps++
	h.mu.Unlock()
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
				// unchecked: an unmask refused leaves the port masked, and
				// the stops are then found by the timed state check (Poll);
				// ending Wait instead would end the target with its int3
				// bytes still in the guest
				unix.Write(int(e.f.Fd()), u[:])
				fired = true
			}
		}
		if fds[1].Revents&unix.POLLIN != 0 {
			var b [16]byte
			unix.Read(e.wake[0], b[:]) // unchecked: draining the wake pipe; what is left wakes the next Wait early, no more
			return fired, nil
		}
		if fired {
			return true, nil
		}
	}
}

// Kick makes Wait return.
func (e *Events) Kick() {
	unix.Write(e.wake[1], []byte{1}) // unchecked: only a full pipe refuses, and a full pipe wakes Wait already
}

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
	h.mu.Lock()
	h.counts.Hypercalls++
	h.counts.FrameMaps++
	h.mu.Unlock()
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
