package linuxkernel

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/symbols"
)

var (
	_ engine.StackUnwinder = (*Guest)(nil)
	_ engine.StackRefuser  = (*Guest)(nil)
)

// userStacksRefused is why a guest's user stack is not taken.
const userStacksRefused = "a guest's user stacks are not unwound (their code's CFI is in the guest's own files, which gprobes does not read): log kstack takes the kernel stack"

// StackRefused says at insert why a stack of the kind cannot be taken in
// this guest, or "": a user stack never; a kernel stack without the
// ORC tables of the guest's vmlinux among the symbols.
func (g *Guest) StackRefused(kernel bool) string {
	if !kernel {
		return userStacksRefused
	}
	_, why := g.K.orcTable()
	return why
}

// Unwind walks the kernel stack of a vCPU stopped at a hit with the ORC
// tables of the vmlinux given with --symbols, through guest memory. A
// user stack is not taken (ok false: invalid-operand; insert refuses it
// first).
func (g *Guest) Unwind(space, tid int, regs *engine.Regs, kernel bool, pcs []uint64) (int, uint64, bool) {
	return g.K.Unwind(regs, kernel, pcs)
}

// NameFrames names kernel frames: the image's from the kernel's symbols,
// a module's from its kallsyms in guest memory.
func (g *Guest) NameFrames(space int, kernel bool, pcs []uint64, exact uint64) []probe.Frame {
	return g.K.NameFrames(kernel, pcs, exact)
}

// Unwind is Guest.Unwind.
func (k *Kernel) Unwind(regs *engine.Regs, kernel bool, pcs []uint64) (int, uint64, bool) {
	if !kernel {
		return 0, 0, false
	}
	t, why := k.orcTable()
	if why != "" {
		return 0, 0, false
	}
	if regs[rpn.RegCS]&3 == 3 {
		return 0, 0, true // user mode: no kernel frame
	}
	r := &blockReader{mem: k.mem}
	var mods []modText
	modsRead := false
	find := func(ip uint64) *orcEntry {
		if e := t.find(ip - k.slide); e != nil || ip-k.slide >= t.lo && ip-k.slide < t.hi {
			return e
		}
		// a module's code: its ORC, which the kernel keeps in the
		// module's memory (read once per module load)
		if !modsRead {
			mods, modsRead = k.moduleTexts(), true
		}
		for _, m := range mods {
			if ip >= m.base && ip-m.base < m.size {
				if mt := k.moduleORC(m, t.layout64); mt != nil {
					return mt.find(ip)
				}
				return nil
			}
		}
		return nil
	}
	n, exact := orcWalk(find, t.layout64, regs, r.read, pcs)
	return n, exact, true
}

// blockReader reads guest memory for one walk a block at a time: the
// stack words of a walk are near each other, and each read of a stub or
// the hypervisor is a round trip.
type blockReader struct {
	mem    Memory
	blocks map[uint64][]byte // nil: the block could not be read
}

const readBlock = 256 // a power of two below a page: a block never crosses one

func (r *blockReader) read(addr uint64) (uint64, bool) {
	base := addr &^ (readBlock - 1)
	if addr-base <= readBlock-8 {
		if r.blocks == nil {
			r.blocks = map[uint64][]byte{}
		}
		b, ok := r.blocks[base]
		if !ok {
			b = make([]byte, readBlock)
			if r.mem.ReadMem(base, b) != nil {
				b = nil
			}
			r.blocks[base] = b
		}
		if b != nil {
			return binary.LittleEndian.Uint64(b[addr-base:]), true
		}
	}
	var w [8]byte
	if r.mem.ReadMem(addr, w[:]) != nil {
		return 0, false
	}
	return binary.LittleEndian.Uint64(w[:]), true
}

// orcTable loads the ORC tables of the kernel image once per set of
// symbols: from the first ELF file among them that has them. why says
// why there are none.
func (k *Kernel) orcTable() (*orcTable, string) {
	if k.orcDone {
		return k.orc, k.orcWhy
	}
	k.orc, k.orcWhy = k.loadORC()
	k.orcDone = true // until AddSymbols brings more
	return k.orc, k.orcWhy
}

func (k *Kernel) loadORC() (*orcTable, string) {
	const need = "log kstack on a guest unwinds its kernel stack with the ORC tables of the guest's vmlinux (.orc_unwind_ip, .orc_unwind; a kernel built with CONFIG_UNWINDER_ORC)"
	if k.syms == nil || len(k.opts.Symbols) == 0 {
		return nil, need + ": give the vmlinux with --symbols"
	}
	if !k.slideOK {
		return nil, need + ", moved by the kernel's KASLR slide, which is unknown: give System.map or a kallsyms copy with --symbols, or --kaslr-offset"
	}
	var noORC []string
	for _, p := range k.opts.Symbols {
		f, err := elf.Open(p)
		if err != nil {
			continue // System.map, kallsyms, raw BTF
		}
		if f.Type != elf.ET_EXEC {
			f.Close()
			continue // a module's .ko: its tables are relocated at load (read from guest memory)
		}
		t, why := k.orcOf(f, p)
		f.Close()
		if t != nil {
			return t, ""
		}
		if why != "" {
			return nil, why
		}
		noORC = append(noORC, filepath.Base(p))
	}
	given := make([]string, len(k.opts.Symbols))
	for i, p := range k.opts.Symbols {
		given[i] = filepath.Base(p)
	}
	if len(noORC) > 0 {
		return nil, fmt.Sprintf("%s, and %s has none (a kernel built without the ORC unwinder, whose frame pointers gprobes does not follow yet)", need, strings.Join(noORC, ", "))
	}
	return nil, fmt.Sprintf("%s, and no file given with --symbols is an ELF vmlinux (given: %s): give the guest's vmlinux too", need, strings.Join(given, ", "))
}

// orcOf reads the ORC tables of one ELF file: nil and "" when it has
// none, nil and a reason when they cannot be used.
func (k *Kernel) orcOf(f *elf.File, path string) (*orcTable, string) {
	ipSec, entSec := f.Section(".orc_unwind_ip"), f.Section(".orc_unwind")
	if ipSec == nil || entSec == nil || ipSec.Type == elf.SHT_NOBITS || entSec.Type == elf.SHT_NOBITS {
		return nil, ""
	}
	// the file must be the build the guest runs: another build's tables
	// would describe other code
	if guest := k.GuestBuildID(); guest != nil {
		if s := f.Section(".notes"); s != nil {
			if b, err := s.Data(); err == nil {
				if id := symbols.NotesBuildID(b); id != nil && !bytes.Equal(id, guest) {
					return nil, fmt.Sprintf("log kstack: the ORC tables of %s are of build %s, and the guest runs build %s: give the guest's own vmlinux with --symbols", path, hex.EncodeToString(id), hex.EncodeToString(guest))
				}
			}
		}
	}
	ips, err := ipSec.Data()
	if err != nil {
		return nil, fmt.Sprintf("log kstack: read .orc_unwind_ip of %s: %v", path, err)
	}
	ents, err := entSec.Data()
	if err != nil {
		return nil, fmt.Sprintf("log kstack: read .orc_unwind of %s: %v", path, err)
	}
	var textEnd uint64
	if s, err := k.syms.Lookup("_etext"); err == nil {
		textEnd = s.Addr
	}
	t, err := newORCTable(ips, ipSec.Addr, ents, k.orcLayout64(f), textEnd)
	if err != nil {
		return nil, fmt.Sprintf("log kstack: %s: %v", path, err)
	}
	return t, ""
}

// orcLayout64 says whether struct orc_entry has Linux 6.4's layout
// (type:3, signal:1) rather than the one before (type:2, end:1): the
// kernel's types say (BTF or DWARF); without them, the .orc_header
// section, which 6.4 brought with it.
func (k *Kernel) orcLayout64(f *elf.File) bool {
	if _, _, err := k.syms.Field("struct orc_entry", "signal"); err == nil {
		return true
	}
	if _, _, err := k.syms.Field("struct orc_entry", "end"); err == nil {
		return false
	}
	return f.Section(".orc_header") != nil
}

// NameFrames is Guest.NameFrames: a return address (bit i of exact
// clear) is looked up at the call before it.
func (k *Kernel) NameFrames(kernel bool, pcs []uint64, exact uint64) []probe.Frame {
	out := make([]probe.Frame, len(pcs))
	var mods []modText
	modsRead := false
	for i, pc := range pcs {
		out[i].Address = probe.Hex(pc)
		if !kernel || k.syms == nil || !k.slideOK {
			continue
		}
		look := pc
		if i >= 64 || exact&(1<<i) == 0 {
			look--
		}
		if k.inImage(look) {
			if s, ok := k.syms.SymbolAt(look - k.slide); ok {
				out[i].Function, out[i].Offset, out[i].Module = s.Name, pc-k.slide-s.Addr, "vmlinux"
			}
			continue
		}
		if !modsRead {
			mods, modsRead = k.moduleTexts(), true
		}
		for _, m := range mods {
			if look < m.base || look-m.base >= m.size {
				continue
			}
			out[i].Module = m.name
			want := k.wantModules // naming a frame sets no rendezvous
			ld, ok, err := k.resolveModule(m.name)
			k.wantModules = want
			if err == nil && ok {
				if s, ok := ld.Symbols.SymbolAt(look - k.slide); ok && s.Module == m.name {
					out[i].Function, out[i].Offset = s.Name, pc-k.slide-s.Addr
				}
			}
			break
		}
	}
	return out
}

// inImage says whether addr (running) is in the kernel image's text.
func (k *Kernel) inImage(addr uint64) bool {
	if t, _ := k.orcTable(); t != nil {
		return addr-k.slide >= t.lo && addr-k.slide < t.hi
	}
	lo, err1 := k.syms.Lookup("_stext")
	hi, err2 := k.syms.Lookup("_etext")
	if err1 != nil || err2 != nil {
		return addr < 0xffffffffc0000000 // below the modules' area
	}
	return addr-k.slide >= lo.Addr && addr-k.slide < hi.Addr
}

// modText is a loaded module's core text, and where its ORC tables are
// (struct module's arch: num_orcs, orc_unwind_ip, orc_unwind; 0 where
// the kernel's types lack them).
type modText struct {
	name                 string
	addr                 uint64 // the struct module
	base, size           uint64
	numORC, orcIP, orcEn uint64
}

// modORCLayout is where struct module keeps its ORC tables
// (CONFIG_UNWINDER_ORC's struct mod_arch_specific): ok false when the
// kernel's types do not say.
type modORCLayout struct {
	ok            bool
	num, ip, ents uint64
}

func (k *Kernel) modORCOffsets() modORCLayout {
	var l modORCLayout
	var err error
	if l.num, err = k.syms.Offsetof("struct module", "arch.num_orcs"); err != nil {
		return l
	}
	if l.ip, err = k.syms.Offsetof("struct module", "arch.orc_unwind_ip"); err != nil {
		return l
	}
	if l.ents, err = k.syms.Offsetof("struct module", "arch.orc_unwind"); err != nil {
		return l
	}
	l.ok = true
	return l
}

// maxModORC bounds a module's ORC entries read from guest memory.
const maxModORC = 1 << 20

// moduleORC reads a module's ORC tables from guest memory, once per
// load (the same struct module, text and tables); nil when it has none
// or they cannot be read.
func (k *Kernel) moduleORC(m modText, layout64 bool) *orcTable {
	if m.numORC == 0 || m.numORC > maxModORC || m.orcIP == 0 || m.orcEn == 0 {
		return nil
	}
	if t, ok := k.modORC[m]; ok {
		return t
	}
	ips := make([]byte, 4*m.numORC)
	ents := make([]byte, orcEntrySize*m.numORC)
	var t *orcTable
	if k.mem.ReadMem(m.orcIP, ips) == nil && k.mem.ReadMem(m.orcEn, ents) == nil {
		t, _ = newORCTable(ips, m.orcIP, ents, layout64, m.base+m.size) // unchecked: nil, the walk stops there
	}
	if k.modORC == nil {
		k.modORC = map[modText]*orcTable{}
	}
	k.modORC[m] = t
	return t
}

// moduleTexts reads the guest's module list: each module's name and core
// text; nil when it cannot be read.
func (k *Kernel) moduleTexts() []modText {
	l, err := k.modLayout()
	if err != nil {
		return nil
	}
	var p [8]byte
	if k.mem.ReadMem(l.head, p[:]) != nil {
		return nil
	}
	span := max(l.span, l.textBase.off+8, l.textSize.off+l.textSize.size)
	ol := k.modORCOffsets()
	if ol.ok {
		span = max(span, ol.num+4, ol.ip+8, ol.ents+8)
	}
	buf := make([]byte, span)
	var out []modText
	for next, n := binary.LittleEndian.Uint64(p[:]), 0; next != l.head; n++ {
		if n == maxModules || next == 0 {
			return out
		}
		mod := next - l.list
		if k.mem.ReadMem(mod, buf) != nil {
			return out
		}
		next = binary.LittleEndian.Uint64(buf[l.list:])
		nm := buf[l.name : l.name+moduleNameLen]
		if i := bytes.IndexByte(nm, 0); i >= 0 {
			nm = nm[:i]
		}
		mt := modText{name: string(nm), addr: mod, base: binary.LittleEndian.Uint64(buf[l.textBase.off:]), size: k.u64(buf, l.textSize)}
		if ol.ok {
			mt.numORC = uint64(binary.LittleEndian.Uint32(buf[ol.num:]))
			mt.orcIP, mt.orcEn = binary.LittleEndian.Uint64(buf[ol.ip:]), binary.LittleEndian.Uint64(buf[ol.ents:])
		}
		out = append(out, mt)
	}
	return out
}
