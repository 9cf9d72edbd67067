package xen

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/rpn"
)

func TestHVMBreakpoints(t *testing.T) {
	for _, c := range []struct{ asked, want, err string }{
		{BreakAuto, BreakDR, ""},
		{BreakDR, BreakDR, ""},
		{BreakInt3, BreakInt3, ""}, // hardware's route
		{BreakInt1, "", "ICEBP"},
		{"icebp", "", "want auto"},
	} {
		got, err := hvmBreakpoints(c.asked)
		if got != c.want || (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("hvmBreakpoints(%q) = %q, %v; want %q, error with %q", c.asked, got, err, c.want, c.err)
		}
	}
}

// recorded replays guest frames recorded by lab/xenlab/xenrecord; a frame
// that was not recorded cannot be read.
type recorded map[uint64][]byte

func (m recorded) ReadPhys(addr uint64, p []byte) error {
	for len(p) > 0 {
		f, ok := m[addr>>12]
		if !ok {
			return fmt.Errorf("frame %#x not recorded", addr>>12)
		}
		n := copy(p, f[addr&0xfff:])
		p, addr = p[n:], addr+uint64(n)
	}
	return nil
}

// TestHVMRecorded replays what Xen 4.17 answered about a PVH domU in the
// Xen lab (testdata/pvh-record.json, recorded by lab/xenlab/xenrecord in
// TestXenPVH): vCPU 0's getvcpucontext, paused, and the frames privcmd
// mapped for a page-table walk to linux_banner. An HVM vCPU's context
// carries the guest's own CR3 (a guest-physical address, the PCID in its
// low bits when CR4.PCIDE is set), a ring-0 %cs in kernel mode, and in
// gs_base_kernel the GS base in use: what Context.Regs gives the engine
// and what translate walks, unchanged from PV.
func TestHVMRecorded(t *testing.T) {
	b, err := os.ReadFile("testdata/pvh-record.json")
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Flags   uint32
		Context string
		VA      uint64
		Phys    uint64
		Bytes   string
		Frames  map[string]string
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Flags&dominfHVMFlag == 0 {
		t.Fatalf("flags %#x: not an HVM domain", rec.Flags)
	}
	var ctx Context
	if raw, err := hex.DecodeString(rec.Context); err != nil || len(raw) != len(ctx) {
		t.Fatalf("context: %d bytes, %v", len(raw), err)
	} else {
		copy(ctx[:], raw)
	}
	mem := recorded{}
	for k, v := range rec.Frames {
		fn, err1 := strconv.ParseUint(k, 16, 64)
		f, err2 := hex.DecodeString(v)
		if err1 != nil || err2 != nil || len(f) != 4096 {
			t.Fatalf("frame %s: %v %v", k, err1, err2)
		}
		mem[fn] = f
	}
	var r engine.Regs
	ctx.Regs(&r)
	t.Logf("vCPU 0: rip %#x cs %#x cr0 %#x cr3 %#x cr4 %#x gs_base %#x, %d frames", r[rpn.RegRIP], r[rpn.RegCS], r[rpn.RegCR0], r[rpn.RegCR3], r[rpn.RegCR4], r[rpn.RegGSBase], len(mem))
	const domMem = 128 << 20 // the lab's domU: guest-physical addresses below 128 MiB
	if r[rpn.RegCR0]&(1<<31) == 0 || r[rpn.RegCR4]&(1<<5) == 0 || r[rpn.RegCR3]&^0xfff >= domMem {
		t.Errorf("cr0 %#x cr3 %#x cr4 %#x: want paging, PAE and a guest-physical CR3", r[rpn.RegCR0], r[rpn.RegCR3], r[rpn.RegCR4])
	}
	if r[rpn.RegCS]&3 == 0 && r[rpn.RegGSBase] < 0xffff_8000_0000_0000 {
		t.Errorf("in ring 0, gs_base %#x: want the kernel's per-CPU base", r[rpn.RegGSBase])
	}
	tr, err := Translate(mem, PagingOf(ctx.CR(4), 64), ctx.CR(3), ctx.CR(4), rec.VA&^0xfff)
	if err != nil {
		t.Fatal(err)
	}
	if phys := tr.Phys + rec.VA&0xfff; phys != rec.Phys || phys >= domMem {
		t.Errorf("%#x translated to %#x, recorded %#x", rec.VA, phys, rec.Phys)
	}
	got := make([]byte, 64)
	if err := mem.ReadPhys(rec.Phys, got); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(got), "Linux version") || hex.EncodeToString(got) != rec.Bytes {
		t.Errorf("at linux_banner: %q", got)
	}
}

// dominfHVMFlag is XEN_DOMINF_hvm_guest (sys_linux.go's dominfHVM, which
// is Linux-only).
const dominfHVMFlag = 1 << 1
