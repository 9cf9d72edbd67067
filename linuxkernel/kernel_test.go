package linuxkernel_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf/btf"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/linuxkernel"
	"github.com/gprobes/gprobes/rpn"
)

// guestMem is a fake guest's kernel memory: pages that exist, everything
// else unreadable (as a stub answers for unmapped memory).
type guestMem struct {
	pages  map[uint64][]byte
	reads  int
	writes []uint64
}

func newMem() *guestMem { return &guestMem{pages: map[uint64][]byte{}} }

func (m *guestMem) put(addr uint64, b []byte) {
	for i, c := range b {
		a := addr + uint64(i)
		p := m.pages[a>>12]
		if p == nil {
			p = make([]byte, 4096)
			m.pages[a>>12] = p
		}
		p[a&4095] = c
	}
}

func (m *guestMem) put64(addr, v uint64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	m.put(addr, b[:])
}

func (m *guestMem) put32(addr uint64, v uint32) {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	m.put(addr, b[:])
}

func (m *guestMem) ReadMem(addr uint64, p []byte) error {
	m.reads++
	for i := range p {
		a := addr + uint64(i)
		pg := m.pages[a>>12]
		if pg == nil {
			return fmt.Errorf("%#x: not mapped", a)
		}
		p[i] = pg[a&4095]
	}
	return nil
}

func (m *guestMem) WriteMem(addr uint64, p []byte) error {
	for i := range p {
		if m.pages[(addr+uint64(i))>>12] == nil {
			return fmt.Errorf("%#x: not mapped", addr+uint64(i))
		}
	}
	m.writes = append(m.writes, addr)
	m.put(addr, p)
	return nil
}

func (m *guestMem) u64(t *testing.T, addr uint64) uint64 {
	var b [8]byte
	if err := m.ReadMem(addr, b[:]); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint64(b[:])
}

// The guest: link-time addresses (System.map) and where the running
// kernel has them, 0x1c600000 higher (a KASLR slide: a multiple of 2 MiB).
const (
	slide       = 0x1c600000
	stext       = 0xffffffff81000000
	etext       = 0xffffffff82000000
	banner      = 0xffffffff82200100
	currentTask = 0x21d40 // a per-CPU offset
	modulesHead = 0xffffffff82a0b0d0
	doInit      = 0xffffffff8117e4f0
	freeModule  = 0xffffffff8117d310
	startNotes  = 0xffffffff81e00000
	stopNotes   = 0xffffffff81e00024
	gsBase      = 0xffff88807dc00000
	task        = 0xffff888004f3a000
	stack       = 0xffffc90000a1c000
)

// The layouts the types below give.
const (
	offPid, offTgid, offStack = 0x5c0, 0x5c4, 0x20
	threadSize, ptSize        = 0x4000, 21 * 8
	ptBase                    = stack + threadSize - ptSize
	// struct module (6.4 and later: mem[])
	offState, offList, offName, offMem, offKallsyms, offNotes = 0, 8, 24, 0x140, 0x2c8, 0x310
	offArch                                                   = 0x320 // struct mod_arch_specific: num_orcs, orc_unwind_ip, orc_unwind
	moduleSize                                                = 0x400
	memSize                                                   = 16 // struct module_memory {void *base; unsigned int size;}
)

var ptOrder = []string{"r15", "r14", "r13", "r12", "bp", "bx", "r11", "r10", "r9", "r8", "ax", "cx", "dx", "si", "di", "orig_ax", "ip", "cs", "flags", "sp", "ss"}

// kernelBTF is the guest's types, as a vmlinux's .BTF would give them.
func kernelBTF(t *testing.T) []byte {
	t.Helper()
	u64 := &btf.Int{Name: "long unsigned int", Size: 8}
	u32 := &btf.Int{Name: "unsigned int", Size: 4}
	i32 := &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed}
	char := &btf.Int{Name: "char", Size: 1, Encoding: btf.Char}
	voidp := &btf.Pointer{Target: &btf.Void{}}
	charp := &btf.Pointer{Target: char}
	m := func(name string, typ btf.Type, off uint32) btf.Member {
		return btf.Member{Name: name, Type: typ, Offset: btf.Bits(off * 8)}
	}
	taskT := &btf.Struct{Name: "task_struct", Size: 0x1000, Members: []btf.Member{
		m("stack", voidp, offStack), m("pid", i32, offPid), m("tgid", i32, offTgid)}}
	union := &btf.Union{Name: "thread_union", Size: threadSize, Members: []btf.Member{
		m("stack", &btf.Array{Index: u32, Type: u64, Nelems: threadSize / 8}, 0)}}
	var pm []btf.Member
	for i, n := range ptOrder {
		pm = append(pm, m(n, u64, uint32(i*8)))
	}
	ptRegs := &btf.Struct{Name: "pt_regs", Size: ptSize, Members: pm}
	listHead := &btf.Struct{Name: "list_head", Size: 16}
	listHead.Members = []btf.Member{m("next", &btf.Pointer{Target: listHead}, 0), m("prev", &btf.Pointer{Target: listHead}, 8)}
	modMem := &btf.Struct{Name: "module_memory", Size: memSize, Members: []btf.Member{m("base", voidp, 0), m("size", u32, 8)}}
	kallsyms := &btf.Struct{Name: "mod_kallsyms", Size: 32, Members: []btf.Member{
		m("symtab", voidp, 0), m("num_symtab", u32, 8), m("strtab", charp, 16), m("typetab", charp, 24)}}
	attr := &btf.Struct{Name: "attribute", Size: 16, Members: []btf.Member{m("name", charp, 0), m("mode", u32, 8)}}
	binAttr := &btf.Struct{Name: "bin_attribute", Size: 56, Members: []btf.Member{
		m("attr", attr, 0), m("size", u64, 16), m("private", voidp, 24)}}
	notesAttrs := &btf.Struct{Name: "module_notes_attrs", Size: 16, Members: []btf.Member{
		m("dir", voidp, 0), m("notes", u32, 8), m("attrs", &btf.Array{Index: u32, Type: binAttr, Nelems: 0}, 16)}}
	module := &btf.Struct{Name: "module", Size: moduleSize, Members: []btf.Member{
		m("state", i32, offState), m("list", listHead, offList),
		m("name", &btf.Array{Index: u32, Type: char, Nelems: 56}, offName),
		m("mem", &btf.Array{Index: u32, Type: modMem, Nelems: 7}, offMem),
		m("kallsyms", &btf.Pointer{Target: kallsyms}, offKallsyms),
		m("notes_attrs", &btf.Pointer{Target: notesAttrs}, offNotes),
		m("arch", &btf.Struct{Name: "mod_arch_specific", Size: 24, Members: []btf.Member{
			m("num_orcs", u32, 0), m("orc_unwind_ip", &btf.Pointer{Target: i32}, 8), m("orc_unwind", voidp, 16)}}, offArch)}}
	b, err := btf.NewBuilder([]btf.Type{taskT, union, ptRegs, module, binAttr, notesAttrs}, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := b.Marshal(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// guestFiles writes the guest's System.map and BTF.
func guestFiles(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	sm := fmt.Sprintf(`%016x T _stext
%016x T _etext
%016x D linux_banner
%016x A current_task
%016x D modules
%016x T do_init_module
%016x T free_module
%016x R __start_notes
%016x R __stop_notes
`, uint64(stext), uint64(etext), uint64(banner), currentTask, uint64(modulesHead), uint64(doInit), uint64(freeModule), uint64(startNotes), uint64(stopNotes))
	files := []string{filepath.Join(dir, "System.map"), filepath.Join(dir, "vmlinux.btf")}
	if err := os.WriteFile(files[0], []byte(sm), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files[1], kernelBTF(t), 0o644); err != nil {
		t.Fatal(err)
	}
	return files
}

// buildIDNote is an ELF note: namesz, descsz, type 3 (NT_GNU_BUILD_ID),
// "GNU\0", the ID.
func buildIDNote(id []byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 4)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(id)))
	b = binary.LittleEndian.AppendUint32(b, 3)
	b = append(b, "GNU\x00"...)
	return append(b, id...)
}

var kernelID = []byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}

// booted is a fake guest kernel running at the slide: its banner, notes,
// the current task of the vCPU at gsBase with its pt_regs, and the module
// list (filled by the tests that need modules).
func booted(t *testing.T) *guestMem {
	m := newMem()
	// what is at the link-time address of linux_banner, and at two other
	// candidates, is not the banner
	m.put(banner, []byte("Linux versioN "))
	m.put(banner+4<<20, []byte("Linux"))
	m.put(banner+slide, []byte("Linux version 6.12.9 (gcc 14) #1 SMP\n"))
	note := buildIDNote(kernelID)
	if len(note) != stopNotes-startNotes {
		t.Fatalf("the note is %d bytes, the symbols say %d", len(note), stopNotes-startNotes)
	}
	m.put(startNotes+slide, note)
	m.put64(gsBase+currentTask, task)
	m.put32(task+offPid, 4242)
	m.put32(task+offTgid, 4240)
	m.put64(task+offStack, stack)
	for i := range ptOrder {
		m.put64(ptBase+uint64(i*8), 0x1000+uint64(i))
	}
	m.put64(ptBase+17*8, 0x33)                    // cs: user mode, RPL 3
	m.put64(ptBase+18*8, 0x246)                   // flags: IF, ZF, PF
	m.put64(modulesHead+slide, modulesHead+slide) // an empty list
	m.put64(modulesHead+slide+8, modulesHead+slide)
	return m
}

func newKernel(t *testing.T, m *guestMem) *linuxkernel.Kernel {
	t.Helper()
	k, err := linuxkernel.New(m, linuxkernel.Options{Symbols: guestFiles(t)})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// The slide is where linux_banner reads "Linux version ": exactly, and
// the image's addresses move by it (bias, executable range, build ID read
// from the slid notes).
func TestKASLRSlide(t *testing.T) {
	m := booted(t)
	k := newKernel(t, m)
	if s, ok := k.Slide(); !ok || s != slide {
		t.Fatalf("slide %#x, %v; want %#x", s, ok, slide)
	}
	ld, ok, err := k.Resolve("vmlinux")
	if err != nil || !ok {
		t.Fatalf("Resolve(vmlinux): %v %v", ok, err)
	}
	if ld.Bias != slide || ld.Key != "vmlinux" {
		t.Errorf("vmlinux: bias %#x, key %q", ld.Bias, ld.Key)
	}
	for a, want := range map[uint64]bool{stext + slide - 1: false, stext + slide: true, etext + slide - 1: true, etext + slide: false, stext: false} {
		if ld.Exec(a) != want {
			t.Errorf("Exec(%#x) = %v", a, !want)
		}
	}
	if !bytes.Equal(ld.BuildID, kernelID) || !bytes.Equal(k.GuestBuildID(), kernelID) {
		t.Errorf("build ID %x, want %x", ld.BuildID, kernelID)
	}
	sym, err := ld.Symbols.Lookup("_stext")
	if err != nil || sym.Addr+ld.Bias != stext+slide {
		t.Errorf("_stext at %#x+%#x: %v", sym.Addr, ld.Bias, err)
	}
}

// --kaslr-offset wins over the banner; without a banner anywhere the error
// says what the link-time address holds and what to do.
func TestKASLRGivenAndMissing(t *testing.T) {
	m := booted(t)
	given := int64(0x2000000)
	k, err := linuxkernel.New(m, linuxkernel.Options{Symbols: guestFiles(t), KASLROffset: &given})
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := k.Slide(); !ok || s != 0x2000000 {
		t.Errorf("given slide: %#x %v", s, ok)
	}
	m = booted(t)
	m.put(banner+slide, []byte("Lunix"))
	_, err = linuxkernel.New(m, linuxkernel.Options{Symbols: guestFiles(t)})
	if err == nil || !strings.Contains(err.Error(), `cannot find the kernel's KASLR slide: no "Linux version" at linux_banner (0xffffffff82200100; it reads "Linux versioN ")`) ||
		!strings.Contains(err.Error(), "--kaslr-offset") {
		t.Errorf("no banner: %v", err)
	}
	// no slide known: neither the image nor a module resolves
	m = newMem()
	_, err = linuxkernel.New(m, linuxkernel.Options{Symbols: guestFiles(t)})
	if err == nil || !strings.Contains(err.Error(), "reading it: 0xffffffff82200100: not mapped") {
		t.Errorf("unreadable banner: %v", err)
	}
}

// push task, pid, tid and push u of every register, from the vCPU's
// gs_base through current_task to the task and the pt_regs at the top of
// its kernel stack; pop u writes the pt_regs of a task from user mode
// only, rflags only in the bits a user may change.
func TestCurrentTaskAndPtRegs(t *testing.T) {
	m := booted(t)
	k := newKernel(t, m)
	var regs engine.Regs
	regs[rpn.RegGSBase] = gsBase
	for v, want := range map[rpn.SysValue]uint64{rpn.SysTask: task, rpn.SysPID: 4240, rpn.SysTID: 4242} {
		if got, ok := k.Sys(&regs, v); !ok || got != want {
			t.Errorf("Sys(%v) = %#x, %v; want %#x", v, got, ok, want)
		}
	}
	names := map[string]rpn.Reg{"ax": rpn.RegRAX, "bx": rpn.RegRBX, "cx": rpn.RegRCX, "dx": rpn.RegRDX, "si": rpn.RegRSI, "di": rpn.RegRDI,
		"bp": rpn.RegRBP, "sp": rpn.RegRSP, "r8": rpn.RegR8, "r9": rpn.RegR9, "r10": rpn.RegR10, "r11": rpn.RegR11, "r12": rpn.RegR12,
		"r13": rpn.RegR13, "r14": rpn.RegR14, "r15": rpn.RegR15, "ip": rpn.RegRIP, "cs": rpn.RegCS, "flags": rpn.RegRFLAGS, "ss": rpn.RegSS}
	for i, n := range ptOrder {
		r, ok := names[n]
		if !ok {
			continue // orig_ax
		}
		want := 0x1000 + uint64(i)
		switch n {
		case "cs":
			want = 0x33
		case "flags":
			want = 0x246
		}
		if got, ok := k.UserReg(&regs, r); !ok || got != want {
			t.Errorf("UserReg(%s) = %#x, %v; want %#x (pt_regs at %#x)", n, got, ok, want, uint64(ptBase))
		}
	}
	if !k.SetUserReg(&regs, rpn.RegRAX, 0xabc) || m.u64(t, ptBase+10*8) != 0xabc {
		t.Errorf("pop u,rax: pt_regs.ax = %#x", m.u64(t, ptBase+10*8))
	}
	// over 0x246: IF (bit 9) and bit 1 stay, PF and ZF go; CF and TF are
	// the user's, IOPL (0x3000) is not
	if !k.SetUserReg(&regs, rpn.RegRFLAGS, 0x3101) || m.u64(t, ptBase+18*8) != 0x303 {
		t.Errorf("pop u,rflags 0x3101 over 0x246: %#x, want 0x303", m.u64(t, ptBase+18*8))
	}
	// a kernel thread's frame (cs RPL 0): nothing written
	m.put64(ptBase+17*8, 0x10)
	n := len(m.writes)
	if k.SetUserReg(&regs, rpn.RegRAX, 1) || len(m.writes) != n {
		t.Errorf("pop u in a kernel thread's frame was written")
	}
	// no gs_base (not in the kernel): no current task
	regs[rpn.RegGSBase] = 0
	if v, ok := k.Sys(&regs, rpn.SysTask); ok {
		t.Errorf("Sys(task) without gs_base = %#x", v)
	}
}

// A module's slot in the fake guest.
type fakeModule struct {
	addr, text, textSize uint64
	name                 string
	state                uint32
	syms                 []fakeSym
	id                   []byte
}

type fakeSym struct {
	name  string
	value uint64
	size  uint64
	kind  byte
}

// link puts modules in the guest's list in order, each with its
// kallsyms and notes.
func link(m *guestMem, mods ...fakeModule) {
	head := uint64(modulesHead + slide)
	prev := head
	for i, md := range mods {
		next := head
		if i+1 < len(mods) {
			next = mods[i+1].addr + offList
		}
		m.put64(prev, md.addr+offList) // prev->next
		m.put64(md.addr+offList, next)
		m.put32(md.addr+offState, md.state)
		m.put(md.addr+offName, append([]byte(md.name), 0))
		m.put64(md.addr+offMem, md.text)
		m.put32(md.addr+offMem+8, uint32(md.textSize))
		// kallsyms: symtab (Elf64_Sym, the first empty), strtab, typetab
		ks := md.addr + 0x1000
		symtab, strtab, typetab := ks+0x100, ks+0x800, ks+0xc00
		m.put64(md.addr+offKallsyms, ks)
		m.put64(ks, symtab)
		m.put32(ks+8, uint32(len(md.syms)+1))
		m.put64(ks+16, strtab)
		m.put64(ks+24, typetab)
		strs := []byte{0}
		m.put(typetab, []byte{0})
		for j, s := range md.syms {
			e := symtab + uint64(j+1)*24
			m.put32(e, uint32(len(strs)))
			m.put64(e+8, s.value)
			m.put64(e+16, s.size)
			strs = append(append(strs, s.name...), 0)
			m.put(typetab+uint64(j+1), []byte{s.kind})
		}
		m.put(strtab, strs)
		// notes: one bin_attribute whose private is a build-ID note
		if md.id != nil {
			attrs := ks + 0x1000
			m.put64(md.addr+offNotes, attrs)
			m.put32(attrs+8, 1)
			note := buildIDNote(md.id)
			m.put64(attrs+16+16, uint64(len(note)))
			m.put64(attrs+16+24, ks+0x1800)
			m.put(ks+0x1800, note)
		} else {
			m.put64(md.addr+offNotes, 0)
		}
		prev = md.addr + offList
	}
	m.put64(prev, head)
}

var (
	ext4 = fakeModule{addr: 0xffffffffc0a00000, text: 0xffffffffc0a10000, textSize: 0x8000, name: "ext4", state: 1, // COMING
		syms: []fakeSym{{"ext4_fill_super", 0xffffffffc0a12000, 0x900, 't'}}}
	rmd160 = fakeModule{addr: 0xffffffffc0b00000, text: 0xffffffffc0b10000, textSize: 0x2000, name: "rmd160", state: 0,
		syms: []fakeSym{{"rmd160_final", 0xffffffffc0b10400, 0x80, 't'}, {"rmd160_init", 0xffffffffc0b10100, 0x20, 't'},
			{"crypto_register_shash", 0, 0, 'U'}, {"rmd160_alg", 0xffffffffc0b12000, 0x100, 'd'}},
		id: []byte{0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0, 1}}
)

// A kernel module is found in the guest's list by its name, with its
// symbols from its in-memory kallsyms (undefined ones left out), its text
// range and its build ID from its notes; a module being freed, or absent,
// is not loaded; the load and unload rendezvous are the slid functions.
func TestModules(t *testing.T) {
	m := booted(t)
	link(m, ext4, rmd160)
	k := newKernel(t, m)
	g := &linuxkernel.Guest{K: k, Target: "gdb:"}
	if r := g.Rendezvous(0); r != nil {
		t.Errorf("rendezvous before a module was asked for: %#x", r)
	}
	ld, ok, err := k.Resolve("rmd160.ko")
	if err != nil || !ok {
		t.Fatalf("Resolve(rmd160.ko): %v %v", ok, err)
	}
	if ld.Key != "kernel module rmd160" || ld.Bias != slide || !bytes.Equal(ld.BuildID, rmd160.id) {
		t.Errorf("rmd160: key %q, bias %#x, build ID %x", ld.Key, ld.Bias, ld.BuildID)
	}
	for _, s := range rmd160.syms {
		got, err := ld.Symbols.Lookup(s.name)
		if s.kind == 'U' {
			if err == nil && got.Module == "rmd160" {
				t.Errorf("%s, undefined in the module, was read as its: %+v", s.name, got)
			}
			continue
		}
		if err != nil || got.Addr+ld.Bias != s.value || got.Size != s.size || got.Kind != s.kind {
			t.Errorf("%s: %+v (bias %#x), %v; want at %#x, size %d, %c", s.name, got, ld.Bias, err, s.value, s.size, s.kind)
		}
	}
	if !ld.Exec(rmd160.text) || !ld.Exec(rmd160.text+rmd160.textSize-1) || ld.Exec(rmd160.text+rmd160.textSize) || ld.Exec(ext4.text) {
		t.Errorf("rmd160's Exec range is wrong")
	}
	// ext4 has no notes (no build ID) and is COMING (its init not run
	// yet): loaded
	if ld, ok, err := k.Resolve("ext4"); err != nil || !ok {
		t.Errorf("ext4: %v %v", ok, err)
	} else if ld.BuildID != nil {
		t.Errorf("ext4: build ID %x without notes", ld.BuildID)
	}
	if want := []uint64{doInit + slide, freeModule + slide}; !slices.Equal(g.Rendezvous(0), want) {
		t.Errorf("rendezvous %#x, want %#x", g.Rendezvous(0), want)
	}
	// absent; being freed (GOING)
	if _, ok, err := k.Resolve("xfs"); ok || err != nil {
		t.Errorf("xfs: %v %v", ok, err)
	}
	going := rmd160
	going.state = 2
	m2 := booted(t)
	link(m2, ext4, going)
	if _, ok, err := newKernel(t, m2).Resolve("rmd160"); ok || err != nil {
		t.Errorf("a GOING module resolved: %v %v", ok, err)
	}
	// a list that never comes back to its head
	m3 := booted(t)
	link(m3, ext4)
	m3.put64(ext4.addr+offList, ext4.addr+offList)
	if _, _, err := newKernel(t, m3).Resolve("xfs"); err == nil || !strings.Contains(err.Error(), "does not come back to its head") {
		t.Errorf("looping list: %v", err)
	}
}

// The gdb command that exit 4 prints for a guest: the vmlinux loaded at
// the slide, quoted for a shell.
func TestGDBCommand(t *testing.T) {
	m := booted(t)
	files := guestFiles(t)
	// a vmlinux: any ELF file with symbols (the test binary), in a
	// folder whose name needs quoting
	dir := filepath.Join(t.TempDir(), "my kernel")
	os.Mkdir(dir, 0o755)
	vmlinux := filepath.Join(dir, "vmlinux")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, vmlinux); err != nil {
		t.Fatal(err)
	}
	k, err := linuxkernel.New(m, linuxkernel.Options{Symbols: files})
	if err != nil {
		t.Fatal(err)
	}
	if got := k.GDBCommand("localhost:1234"); got != "gdb -ex 'target remote localhost:1234'" {
		t.Errorf("without a vmlinux: %s", got)
	}
	k2, err := linuxkernel.New(m, linuxkernel.Options{Symbols: files})
	if err != nil {
		t.Fatal(err)
	}
	// Vmlinux looks at the files given; the ELF need not be a kernel
	if err := k2.AddSymbols([]string{vmlinux}); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("gdb -ex 'symbol-file -o 0x1c600000 %s' -ex 'target remote localhost:1234'", vmlinux)
	if got := k2.GDBCommand("localhost:1234"); got != want {
		t.Errorf("GDBCommand:\n got %s\nwant %s", got, want)
	}
	for in, want := range map[string]string{"plain/path-1.0:x": "plain/path-1.0:x", "": "''", "a b": "'a b'", "it's": `'it'\''s'`} {
		if got := linuxkernel.ShellQuote(in); got != want {
			t.Errorf("ShellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
