package xen

import (
	"encoding/binary"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	hypercallHVMOp           = 34
	hvmopGetParam            = 1
	ioctlEvtchnBindInterdom  = 0x00084501 // _IOC(_IOC_NONE, 'E', 1, 8)
	ioctlEvtchnNotify        = 0x00044504 // _IOC(_IOC_NONE, 'E', 4, 4)
	ioctlEvtchnUnbindVMEvent = 0x00044503 // _IOC(_IOC_NONE, 'E', 3, 4)
)

var _ vmHypervisor = (*Hypervisor)(nil)

// HVMParam reads an HVM parameter of a domain (HVMOP_get_param).
func (h *Hypervisor) HVMParam(dom uint16, index uint32) (uint64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.buf[:16] // struct xen_hvm_param
	clear(p)
	binary.LittleEndian.PutUint16(p[0:], dom)
	binary.LittleEndian.PutUint32(p[4:], index)
	if _, err := h.hypercall(hypercallHVMOp, hvmopGetParam, uint64(uintptr(unsafe.Pointer(&p[0])))); err != nil {
		return 0, fmt.Errorf("xen: hvm_op get_param %d of domain %d: %w", index, dom, err)
	}
	return binary.LittleEndian.Uint64(p[8:]), nil
}

// VMEventOp enables (answering the event channel port of Xen's end) or
// disables a domain's monitor ring (XEN_DOMCTL_vm_event_op, mode monitor).
func (h *Hypervisor) VMEventOp(dom uint16, op uint32) (port uint32, err error) {
	err = h.domctl(domctlVMEventOp, dom, func(u []byte) {
		binary.LittleEndian.PutUint32(u[0:], op)
		binary.LittleEndian.PutUint32(u[4:], vmEventOpMonitor)
	}, func(u []byte) { port = binary.LittleEndian.Uint32(u[8:]) })
	return port, err
}

// MonitorOp enables or disables one kind of monitor event
// (XEN_DOMCTL_monitor_op); sync makes a debug exception pause its vCPU
// until answered.
func (h *Hypervisor) MonitorOp(dom uint16, op, event uint32, sync bool) error {
	return h.domctl(domctlMonitorOp, dom, func(u []byte) {
		binary.LittleEndian.PutUint32(u[0:], op)
		binary.LittleEndian.PutUint32(u[4:], event)
		if sync {
			u[8] = 1
		}
	}, nil)
}

func (h *Hypervisor) mapRing(dom uint16, gfn uint64) ([]byte, error) {
	return h.MapFrame(dom, gfn, true)
}
func (h *Hypervisor) unmapRing(b []byte) { UnmapFrame(b) }

// evtchnPort is one interdomain event channel of /dev/xen/evtchn, with a
// pipe that Wake writes.
type evtchnPort struct {
	f    *os.File
	port uint32 // our end
	wake [2]int
}

func openVMChannel() (*evtchnPort, error) {
	f, err := os.OpenFile("/dev/xen/evtchn", os.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("xen: %w (is xen-evtchn loaded?)", err)
	}
	e := &evtchnPort{f: f}
	if err := unix.Pipe2(e.wake[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		f.Close()
		return nil, err
	}
	return e, nil
}

func (e *evtchnPort) Bind(dom uint16, port uint32) error {
	b := [2]uint32{uint32(dom), port}
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, e.f.Fd(), ioctlEvtchnBindInterdom, uintptr(unsafe.Pointer(&b)))
	if errno != 0 {
		return errno
	}
	e.port = uint32(r)
	return nil
}

func (e *evtchnPort) Wait() (bool, error) {
	fds := []unix.PollFd{{Fd: int32(e.f.Fd()), Events: unix.POLLIN}, {Fd: int32(e.wake[0]), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, err
		}
		if fds[1].Revents&unix.POLLIN != 0 {
			var b [16]byte
			unix.Read(e.wake[0], b[:]) // unchecked: draining the wake pipe; what is left wakes the next wait early, no more
			return false, nil
		}
		if fds[0].Revents&unix.POLLIN == 0 {
			continue
		}
		var b [64]byte
		n, _ := unix.Read(int(e.f.Fd()), b[:])
		for i := 0; i+4 <= n; i += 4 {
			// unchecked: an unmask refused leaves the port masked (no
			// more notifications); ending the wait instead would end the
			// target with its int3 bytes still in the guest
			unix.Write(int(e.f.Fd()), b[i:i+4])
		}
		return n > 0, nil
	}
}

func (e *evtchnPort) Notify() error {
	p := e.port
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, e.f.Fd(), ioctlEvtchnNotify, uintptr(unsafe.Pointer(&p))); errno != 0 {
		return errno
	}
	return nil
}

func (e *evtchnPort) Wake() {
	unix.Write(e.wake[1], []byte{1}) // unchecked: only a full pipe refuses, and a full pipe wakes already
}

func (e *evtchnPort) Close() error {
	if e.port != 0 {
		p := e.port
		unix.Syscall(unix.SYS_IOCTL, e.f.Fd(), ioctlEvtchnUnbindVMEvent, uintptr(unsafe.Pointer(&p)))
	}
	unix.Close(e.wake[0])
	unix.Close(e.wake[1])
	return e.f.Close()
}
