package xen

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeXen plays Xen's side of the monitor: the answers recorded in the lab
// (the ring's frame and port) and the front end of the ring page.
type fakeXen struct {
	mu       sync.Mutex
	gfn      uint64
	port     uint32
	page     []byte
	calls    []string
	pauses   int
	ctx      map[int]*Context
	unmapped bool
	fire     chan bool
	bound    [2]uint32
	notifies int
	closed   bool
	failMon  error
}

func newFakeXen(gfn uint64, port uint32) *fakeXen {
	return &fakeXen{gfn: gfn, port: port, page: make([]byte, 4096), ctx: map[int]*Context{}, fire: make(chan bool, 16)}
}

func (x *fakeXen) log(f string, a ...any) {
	x.mu.Lock()
	x.calls = append(x.calls, fmt.Sprintf(f, a...))
	x.mu.Unlock()
}

func (x *fakeXen) Pause(dom uint16) error {
	x.mu.Lock()
	x.pauses++
	x.mu.Unlock()
	return nil
}
func (x *fakeXen) HVMParam(dom uint16, index uint32) (uint64, error) {
	x.log("hvm_param %d %d", dom, index)
	return x.gfn, nil
}
func (x *fakeXen) VMEventOp(dom uint16, op uint32) (uint32, error) {
	x.log("vm_event_op %d %d", dom, op)
	return x.port, nil
}
func (x *fakeXen) MonitorOp(dom uint16, op, event uint32, sync bool) error {
	x.log("monitor_op %d %d %d %v", dom, op, event, sync)
	return x.failMon
}
func (x *fakeXen) GetContext(dom uint16, vcpu int, ctx *Context) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if c := x.ctx[vcpu]; c != nil {
		*ctx = *c
		return nil
	}
	return errors.New("no such vCPU")
}
func (x *fakeXen) SetContext(dom uint16, vcpu int, ctx *Context) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	c := *ctx
	x.ctx[vcpu] = &c
	return nil
}
func (x *fakeXen) mapRing(dom uint16, gfn uint64) ([]byte, error) {
	x.log("map %d %#x", dom, gfn)
	if gfn != x.gfn {
		return nil, errors.New("not the ring's frame")
	}
	return x.page, nil
}
func (x *fakeXen) unmapRing(b []byte) { x.log("unmap"); x.unmapped = true }

// the event channel
func (x *fakeXen) Bind(dom uint16, port uint32) error {
	x.log("bind %d %d", dom, port)
	x.bound = [2]uint32{uint32(dom), port}
	return nil
}
func (x *fakeXen) Wait() (bool, error) { return <-x.fire, nil }
func (x *fakeXen) Notify() error {
	x.mu.Lock()
	x.notifies++
	x.mu.Unlock()
	return nil
}
func (x *fakeXen) Wake()        { x.fire <- false }
func (x *fakeXen) Close() error { x.closed = true; return nil }

// put is Xen putting a request on the ring (RING_PUSH_REQUESTS) and
// notifying the channel.
func (x *fakeXen) put(reqs ...VMRequest) {
	x.mu.Lock()
	prod := binary.LittleEndian.Uint32(x.page[0:])
	for _, r := range reqs {
		off := vmRingOff + int(prod%vmRingEntries)*vmReqSize
		copy(x.page[off:], r[:])
		prod++
	}
	binary.LittleEndian.PutUint32(x.page[0:], prod)
	x.mu.Unlock()
	x.fire <- true
}

func (x *fakeXen) responses() (prod uint32, last VMRequest) {
	x.mu.Lock()
	defer x.mu.Unlock()
	prod = binary.LittleEndian.Uint32(x.page[8:])
	if prod > 0 {
		off := vmRingOff + int((prod-1)%vmRingEntries)*vmReqSize
		copy(last[:], x.page[off:])
	}
	return prod, last
}

// recordedRequests are the monitor's requests TestXenPVH recorded in the
// Xen lab (QEMU TCG, a PVH domU): the #DB of a single-step (xenrecord step
// DOMID vmevent), the event that TCG delivers.
func recordedRequests(t *testing.T) []VMRequest {
	f, err := os.Open("testdata/vmevent-requests.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var reqs []VMRequest
	s := bufio.NewScanner(f)
	s.Buffer(nil, 4096)
	for s.Scan() {
		b, err := hex.DecodeString(strings.TrimSpace(s.Text()))
		if err != nil || len(b) != vmReqSize {
			t.Fatalf("request %q: %v", s.Text(), err)
		}
		var r VMRequest
		copy(r[:], b)
		reqs = append(reqs, r)
	}
	if len(reqs) == 0 {
		t.Fatal("no recorded requests")
	}
	return reqs
}

// TestVMEventRecorded replays the lab's vm_event requests through the
// monitor against a fake Xen: each debug exception pauses the domain once
// (the stop's pause, which the target undoes), is answered with the
// vCPU's pause let go and nothing else, the answers are published and
// Xen notified, and the targets woken; at the end the events are turned
// off, the ring disabled and unmapped. The ring wraps (more requests than
// its eight slots).
func TestVMEventRecorded(t *testing.T) {
	reqs := recordedRequests(t)
	for _, r := range reqs {
		if r.Version() != vmEventVersion || r.Reason() != vmReasonDebugException || r.Flags()&vmFlagVCPUPaused == 0 || r.VCPU() != 0 || r.PendingDbg() != 0 {
			t.Fatalf("recorded %v: want v7, a debug exception of vCPU 0 paused, no pending_dbg (SVM)", &r)
		}
	}
	t.Logf("%d recorded; first: %v", len(reqs), &reqs[0])
	for len(reqs) <= vmRingEntries { // past the ring's 8 slots
		reqs = append(reqs, reqs...)
	}
	x := newFakeXen(0xfeffc, 3)
	woken := make(chan struct{}, 64)
	var recorded []VMRequest
	m, err := startMonitor(x, x, 7, func() { woken <- struct{}{} }, func(r VMRequest) { recorded = append(recorded, r) })
	if err != nil {
		t.Fatal(err)
	}
	if x.bound != [2]uint32{7, 3} || binary.LittleEndian.Uint32(x.page[4:]) != 1 {
		t.Fatalf("bound %v, req_event %d", x.bound, binary.LittleEndian.Uint32(x.page[4:]))
	}
	for i, r := range reqs {
		x.put(r)
		select {
		case <-woken:
		case <-time.After(5 * time.Second):
			t.Fatalf("request %d: no wake-up", i)
		}
		prod, rsp := x.responses()
		if prod != uint32(i+1) || rsp.Version() != vmEventVersion || rsp.Flags() != vmFlagVCPUPaused || rsp.VCPU() != r.VCPU() || rsp.Reason() != r.Reason() {
			t.Fatalf("request %d: rsp_prod %d, response %v", i, prod, &rsp)
		}
		if x.pauses != i+1 || x.notifies != i+1 {
			t.Fatalf("request %d: %d pauses, %d notifications", i, x.pauses, x.notifies)
		}
	}
	// two at once (two vCPUs stopping together): two pauses, one wake
	x.put(reqs[0], reqs[len(reqs)-1])
	<-woken
	if prod, _ := x.responses(); prod != uint32(len(reqs)+2) || x.pauses != len(reqs)+2 {
		t.Fatalf("two at once: rsp_prod %d, %d pauses", prod, x.pauses)
	}
	if err := m.close(); err != nil {
		t.Fatal(err)
	}
	want := []string{"hvm_param 7 28", "map 7 0xfeffc", "vm_event_op 7 0", "bind 7 3", "monitor_op 7 0 5 true", "monitor_op 7 1 5 false", "vm_event_op 7 1", "unmap"}
	if strings.Join(x.calls, "; ") != strings.Join(want, "; ") || !x.closed || !x.unmapped || len(recorded) != len(reqs)+2 {
		t.Errorf("calls %q (closed %v, %d recorded), want %q", x.calls, x.closed, len(recorded), want)
	}
}

// TestVMEventPendingDbg: VMX leaves %dr6 alone and reports the causes in
// pending_dbg; the monitor puts them into the vCPU's %dr6 before the
// target looks.
func TestVMEventPendingDbg(t *testing.T) {
	x := newFakeXen(0x100, 5)
	x.ctx[1] = &Context{}
	woken := make(chan struct{}, 4)
	m, err := startMonitor(x, x, 2, func() { woken <- struct{}{} }, nil)
	if err != nil {
		t.Fatal(err)
	}
	var r VMRequest
	binary.LittleEndian.PutUint32(r[0:], vmEventVersion)
	binary.LittleEndian.PutUint32(r[vmOffFlags:], vmFlagVCPUPaused)
	binary.LittleEndian.PutUint32(r[vmOffReason:], vmReasonDebugException)
	binary.LittleEndian.PutUint32(r[vmOffVCPU:], 1)
	binary.LittleEndian.PutUint64(r[vmOffPending:], 0x2)
	x.put(r)
	<-woken
	m.close()
	if got := x.ctx[1].DebugReg(6); got != 0x2 {
		t.Errorf("%%dr6 %#x, want B1 from pending_dbg", got)
	}
}

// TestVMEventStartFails: a failure at any step undoes the ones before.
func TestVMEventStartFails(t *testing.T) {
	x := newFakeXen(0x100, 5)
	x.failMon = errors.New("EOPNOTSUPP")
	if _, err := startMonitor(x, x, 2, func() {}, nil); err == nil || !strings.Contains(err.Error(), "debug-exception events") {
		t.Fatalf("error %v", err)
	}
	if !x.closed || !x.unmapped || x.calls[len(x.calls)-2] != "vm_event_op 2 1" {
		t.Errorf("not undone: %q", x.calls)
	}
	if _, err := startMonitor(newFakeXen(0, 5), x, 2, func() {}, nil); err == nil || !strings.Contains(err.Error(), "no monitor ring") {
		t.Errorf("no ring frame: %v", err)
	}
}
