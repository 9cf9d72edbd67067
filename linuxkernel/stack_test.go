package linuxkernel_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/linuxkernel"
	"github.com/gprobes/gprobes/rpn"
)

// The guest's code for the stack tests (link-time; it runs at +slide).
const (
	gpLeaf   = stext + 0x1000 // probed at its first byte
	gpCaller = stext + 0x2000 // one push, then call gp_leaf at +0x20
	gpEntry  = stext + 0x4000 // a pt_regs at sp; call gp_caller at +0x2b
	gpEnd    = stext + 0x5000 // the table's terminator
	orcIPAt  = 0xffffffff82c5f474
)

// orcELF writes a vmlinux (ET_EXEC, x86_64) holding .orc_unwind_ip and
// .orc_unwind for the code above, in Linux 6.1's layout (type:2, end:1),
// unless noORC, and .notes with build ID id.
func orcELF(t *testing.T, id []byte, noORC bool) string {
	t.Helper()
	type ent struct {
		ip           uint64
		spOff, bpOff int16
		spReg, bpReg uint16
		typ, end     uint16
	}
	const sp, prevSP = 5, 1
	ents := []ent{
		{ip: gpLeaf, spOff: 8, spReg: sp},
		{ip: gpCaller, spOff: 8, spReg: sp},
		{ip: gpCaller + 1, spOff: 16, spReg: sp, bpReg: prevSP, bpOff: -16},
		{ip: gpEntry, spReg: sp, typ: 1}, // REGS
		{ip: gpEnd},                      // sp_reg UNDEFINED, end 0
	}
	var ips, orc []byte
	for i, e := range ents {
		ips = binary.LittleEndian.AppendUint32(ips, uint32(int32(int64(e.ip)-int64(orcIPAt+uint64(4*i)))))
		orc = binary.LittleEndian.AppendUint16(orc, uint16(e.spOff))
		orc = binary.LittleEndian.AppendUint16(orc, uint16(e.bpOff))
		orc = binary.LittleEndian.AppendUint16(orc, e.spReg|e.bpReg<<4|e.typ<<8|e.end<<10)
	}
	type sec struct {
		name       string
		typ        uint32
		addr       uint64
		data       []byte
		link, info uint32
		entsize    uint64
	}
	// a symbol table (symbols.Open wants one): the null symbol and a
	// global function, gp_leaf
	sym := make([]byte, 24)
	sym = binary.LittleEndian.AppendUint32(sym, 1)
	sym = append(sym, 0x12, 0) // STB_GLOBAL, STT_FUNC
	sym = binary.LittleEndian.AppendUint16(sym, 0xfff1)
	sym = binary.LittleEndian.AppendUint64(sym, gpLeaf)
	sym = binary.LittleEndian.AppendUint64(sym, 0x10)
	secs := []sec{
		{name: ".notes", typ: 7, addr: startNotes, data: buildIDNote(id)},
		{name: ".symtab", typ: 2, data: sym, link: 3, info: 1, entsize: 24},
		{name: ".strtab", typ: 3, data: []byte("\x00gp_leaf\x00")},
	}
	if !noORC {
		secs = append(secs, sec{name: ".orc_unwind_ip", typ: 1, addr: orcIPAt, data: ips}, sec{name: ".orc_unwind", typ: 1, addr: orcIPAt + 0x200000, data: orc})
	}
	shstr := []byte{0}
	names := make([]uint32, len(secs)+1)
	for i, s := range secs {
		names[i] = uint32(len(shstr))
		shstr = append(append(shstr, s.name...), 0)
	}
	names[len(secs)] = uint32(len(shstr))
	shstr = append(shstr, ".shstrtab\x00"...)
	secs = append(secs, sec{name: ".shstrtab", typ: 3, data: shstr})

	b := make([]byte, 64)
	offs := make([]uint64, len(secs))
	for i, s := range secs {
		offs[i] = uint64(len(b))
		b = append(b, s.data...)
	}
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	shoff := uint64(len(b))
	b = append(b, make([]byte, 64)...) // the null section
	for i, s := range secs {
		h := binary.LittleEndian.AppendUint32(nil, names[i])
		h = binary.LittleEndian.AppendUint32(h, s.typ)
		flags := uint64(2) // SHF_ALLOC
		if s.typ == 2 || s.typ == 3 {
			flags = 0
		}
		h = binary.LittleEndian.AppendUint64(h, flags)
		h = binary.LittleEndian.AppendUint64(h, s.addr)
		h = binary.LittleEndian.AppendUint64(h, offs[i])
		h = binary.LittleEndian.AppendUint64(h, uint64(len(s.data)))
		h = binary.LittleEndian.AppendUint32(h, s.link)
		h = binary.LittleEndian.AppendUint32(h, s.info)
		h = binary.LittleEndian.AppendUint64(h, 1)
		h = binary.LittleEndian.AppendUint64(h, s.entsize)
		b = append(b, h...)
	}
	copy(b, []byte{0x7f, 'E', 'L', 'F', 2, 1, 1})
	binary.LittleEndian.PutUint16(b[16:], 2)  // ET_EXEC
	binary.LittleEndian.PutUint16(b[18:], 62) // EM_X86_64
	binary.LittleEndian.PutUint32(b[20:], 1)
	binary.LittleEndian.PutUint64(b[40:], shoff)
	binary.LittleEndian.PutUint16(b[52:], 64) // e_ehsize
	binary.LittleEndian.PutUint16(b[58:], 64) // e_shentsize
	binary.LittleEndian.PutUint16(b[60:], uint16(len(secs)+1))
	binary.LittleEndian.PutUint16(b[62:], uint16(len(secs)))
	p := filepath.Join(t.TempDir(), "vmlinux")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// codeMap names the test's functions.
func codeMap(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "code.map")
	sm := fmt.Sprintf("%016x T gp_leaf\n%016x T gp_caller\n%016x T entry_gp\n%016x T gp_after\n", uint64(gpLeaf), uint64(gpCaller), uint64(gpEntry), uint64(gpEnd))
	if err := os.WriteFile(p, []byte(sm), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A guest's kernel stack through Guest: unwound with the ORC of the
// vmlinux given (its build the guest's), moved by the slide, through
// guest memory; named from the symbols, a return address at its call; a
// return address into a module without ORC ends the walk and is named
// from the module's kallsyms in guest memory, without making the engine
// stop at
// the module list's changes; with the module's ORC tables in its memory
// the walk goes through it. Without a vmlinux with ORC, or with
// another build's, the refusal says why; a user stack is always refused.
func TestGuestKernelStack(t *testing.T) {
	m := booted(t)
	link(m, rmd160)
	const s = stack + 0x800
	m.put64(s, gpCaller+0x25+slide)   // gp_leaf's return address
	m.put64(s+16, gpEntry+0x30+slide) // gp_caller's, above its one push
	m.put64(s+24+136, 0x33)           // the pt_regs at gp_caller's CFA: from user mode
	m.put64(s+24+128, 0x401000)       // the user's rip
	m.put64(s+24+152, 0x7ffd0000)     // and rsp
	files := append(guestFiles(t), codeMap(t), orcELF(t, kernelID, false))
	k, err := linuxkernel.New(m, linuxkernel.Options{Symbols: files})
	if err != nil {
		t.Fatal(err)
	}
	g := &linuxkernel.Guest{K: k, Target: "gdb:"}
	if why := g.StackRefused(true); why != "" {
		t.Fatalf("kernel stacks refused: %s", why)
	}
	if why := g.StackRefused(false); !strings.Contains(why, "a guest's user stacks are not unwound") {
		t.Errorf("user stacks: %q", why)
	}
	var regs engine.Regs
	regs[rpn.RegRIP], regs[rpn.RegRSP], regs[rpn.RegCS] = gpLeaf+slide, s, 0x10
	pcs := make([]uint64, 16)
	frames := func() string {
		t.Helper()
		n, exact, ok := g.Unwind(0, 1, &regs, true, pcs)
		if !ok {
			t.Fatal("Unwind refused a kernel stack")
		}
		var out []string
		for _, f := range g.NameFrames(0, true, pcs[:n], exact) {
			out = append(out, fmt.Sprintf("%s %#x", f, uint64(f.Address)-slide))
		}
		return strings.Join(out, ", ")
	}
	want := fmt.Sprintf("gp_leaf+0x0 (vmlinux) %#x, gp_caller+0x25 (vmlinux) %#x, entry_gp+0x30 (vmlinux) %#x", uint64(gpLeaf), uint64(gpCaller+0x25), uint64(gpEntry+0x30))
	if got := frames(); got != want {
		t.Errorf("frames:\n got %s\nwant %s", got, want)
	}
	// gp_leaf called from rmd160's code: the frame is recorded, named
	// from the module's kallsyms, and ends the walk
	m.put64(s, 0xffffffffc0b10410)
	want = fmt.Sprintf("gp_leaf+0x0 (vmlinux) %#x, rmd160_final+0x10 (rmd160) %#x", uint64(gpLeaf), uint64(0xffffffffc0b10410-slide))
	if got := frames(); got != want {
		t.Errorf("frames:\n got %s\nwant %s", got, want)
	}
	if r := g.Rendezvous(0); r != nil {
		t.Errorf("naming a module's frame set the module rendezvous: %#x", r)
	}
	// with the module's ORC in its memory (struct module's arch, as the
	// kernel keeps it): the walk goes through rmd160_final (one push)
	// into the image again
	const modIP, modORC = 0xffffffffc0b14000, 0xffffffffc0b15000
	rel := func(to, at uint64) uint32 { return uint32(to - at) } // int32, modulo 2^32
	m.put32(modIP, rel(0xffffffffc0b10400, modIP))
	m.put32(modIP+4, rel(0xffffffffc0b10480, modIP+4))
	m.put(modORC, []byte{16, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0}) // SP+16 CALL; then undefined
	m.put32(rmd160.addr+offArch, 2)
	m.put64(rmd160.addr+offArch+8, modIP)
	m.put64(rmd160.addr+offArch+16, modORC)
	want = fmt.Sprintf("gp_leaf+0x0 (vmlinux) %#x, rmd160_final+0x10 (rmd160) %#x, entry_gp+0x30 (vmlinux) %#x", uint64(gpLeaf), uint64(0xffffffffc0b10410-slide), uint64(gpEntry+0x30))
	if got := frames(); got != want {
		t.Errorf("frames through the module:\n got %s\nwant %s", got, want)
	}
	if _, _, ok := g.Unwind(0, 1, &regs, false, pcs); ok {
		t.Error("Unwind took a user stack")
	}

	refused := func(files []string, want ...string) {
		t.Helper()
		k, err := linuxkernel.New(booted(t), linuxkernel.Options{Symbols: files})
		if err != nil {
			t.Fatal(err)
		}
		g := &linuxkernel.Guest{K: k, Target: "gdb:"}
		why := g.StackRefused(true)
		for _, w := range want {
			if !strings.Contains(why, w) {
				t.Errorf("refusal %q, want %q in it", why, w)
			}
		}
		if _, _, ok := g.Unwind(0, 1, &regs, true, pcs); ok {
			t.Errorf("a refused kernel stack was unwound (%s)", why)
		}
	}
	const need = "log kstack on a guest unwinds its kernel stack with the ORC tables of the guest's vmlinux (.orc_unwind_ip, .orc_unwind; a kernel built with CONFIG_UNWINDER_ORC)"
	refused(guestFiles(t), need, "no file given with --symbols is an ELF vmlinux (given: System.map, vmlinux.btf): give the guest's vmlinux too")
	refused(append(guestFiles(t), orcELF(t, kernelID, true)), need, "vmlinux has none (a kernel built without the ORC unwinder")
	// a module's .ko with ORC sections is not the image's tables
	ko := filepath.Join(t.TempDir(), "rmd160.ko")
	b, err := os.ReadFile(orcELF(t, kernelID, false))
	if err != nil {
		t.Fatal(err)
	}
	b[16] = 1 // ET_REL
	if err := os.WriteFile(ko, b, 0o644); err != nil {
		t.Fatal(err)
	}
	refused(append(guestFiles(t), ko), "no file given with --symbols is an ELF vmlinux (given: System.map, vmlinux.btf, rmd160.ko)")
	other := append([]byte{}, kernelID...)
	other[0] ^= 0xff
	refused(append(guestFiles(t), orcELF(t, other, false)), "are of build 21adbeef", "the guest runs build deadbeef", "give the guest's own vmlinux with --symbols")
}
