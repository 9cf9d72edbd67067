package xen

import (
	"encoding/binary"
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// TestBatchLayout: a multicall of domctls as Xen reads it (struct
// multicall_entry: op, result, args[6]; each args[0] the address of its
// struct xen_domctl; a vCPU context call's handle the address of its
// context after the domctls), and each entry's result, union and context
// given back to its call.
func TestBatchLayout(t *testing.T) {
	const base = 0x7f0000000000
	var set, got Context
	set.SetRIP(0x1234)
	var info DomainInfo
	var sv int
	var sev uint32
	calls := []Call{
		infoCall(7, &info),
		statusCall(7, &sv, &sev),
		contextCall(domctlGetVCPUContext, 7, 1, &got),
		contextCall(domctlSetVCPUContext, 7, 0, &set),
		domCall(domctlUnpauseDomain, 7, -1),
	}
	buf := make([]byte, batchSize(calls))
	if len(buf) != 5*(64+144)+2*ctxSize {
		t.Fatalf("batch size %d", len(buf))
	}
	packBatch(buf, base, calls)
	doms := 5 * 64
	ctxs := doms + 5*144
	u64 := func(off int) uint64 { return binary.LittleEndian.Uint64(buf[off:]) }
	for i, c := range calls {
		e := i * 64
		if u64(e) != hypercallDomctl || u64(e+16) != base+uint64(doms+i*144) {
			t.Errorf("entry %d: op %d args[0] %#x", i, u64(e), u64(e+16))
		}
		d := doms + i*144
		if cmd := binary.LittleEndian.Uint32(buf[d:]); cmd != c.Cmd || binary.LittleEndian.Uint32(buf[d+4:]) != domctlInterfaceVersion || binary.LittleEndian.Uint16(buf[d+8:]) != 7 {
			t.Errorf("domctl %d: cmd %d, version %#x, domain %d", i, cmd, binary.LittleEndian.Uint32(buf[d+4:]), binary.LittleEndian.Uint16(buf[d+8:]))
		}
	}
	// getvcpucontext of vCPU 1 reads into the first context slot,
	// setvcpucontext of vCPU 0 writes from the second
	if d := doms + 2*144; binary.LittleEndian.Uint32(buf[d+16:]) != 1 || u64(d+24) != base+uint64(ctxs) {
		t.Errorf("getvcpucontext: vcpu %d, handle %#x", binary.LittleEndian.Uint32(buf[d+16:]), u64(d+24))
	}
	if d := doms + 3*144; binary.LittleEndian.Uint32(buf[d+16:]) != 0 || u64(d+24) != base+uint64(ctxs+ctxSize) {
		t.Errorf("setvcpucontext: vcpu %d, handle %#x", binary.LittleEndian.Uint32(buf[d+16:]), u64(d+24))
	}
	if u64(ctxs+ctxSize+offRIP) != 0x1234 {
		t.Errorf("the context to set is not in its slot")
	}
	// Xen's answers: getdomaininfo's flags, no int3 event, vCPU 1's
	// context, the unpause refused
	binary.LittleEndian.PutUint16(buf[doms+16:], 7)
	binary.LittleEndian.PutUint32(buf[doms+16+4:], dominfPaused)
	binary.LittleEndian.PutUint32(buf[doms+144+16+4:], ^uint32(0))
	binary.LittleEndian.PutUint64(buf[ctxs+offRIP:], 0xffffffff81000000)
	einval := -int64(unix.EINVAL)
	binary.LittleEndian.PutUint64(buf[4*64+8:], uint64(einval))
	unpackBatch(buf, calls)
	if !info.Paused() || infoErr(7, calls[0], info) != nil {
		t.Errorf("getdomaininfo: %+v %v", info, calls[0].Err)
	}
	if sv != -1 || calls[1].Err != nil {
		t.Errorf("gdbsx_domstatus: vcpu %d %v", sv, calls[1].Err)
	}
	if got.RIP() != 0xffffffff81000000 || calls[2].Err != nil {
		t.Errorf("getvcpucontext: rip %#x %v", got.RIP(), calls[2].Err)
	}
	if calls[3].Err != nil || !errors.Is(calls[4].Err, unix.EINVAL) {
		t.Errorf("results: %v, %v", calls[3].Err, calls[4].Err)
	}
}
