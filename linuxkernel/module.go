package linuxkernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/symbols"
)

// Kernel modules of a guest, read from guest memory (Dynamic Probes'
// deferred module probes, seen from outside the guest):
//
//   - the module list is the kernel's `modules` list_head (System.map or
//     kallsyms give it); each entry is a struct module, whose layout
//     (list, name, state, the core text, kallsyms) comes from the
//     kernel's BTF or DWARF. Linux 6.1 has core_layout.base and
//     core_layout.text_size; 6.4 and later mem[MOD_TEXT].base and .size.
//   - a module is loaded while its state is COMING or LIVE: COMING from
//     complete_formation, before its init runs, to the end of
//     do_init_module; GOING from delete_module (or a failed init) until
//     free_module frees it.
//   - its symbols, at their final addresses, are its in-memory kallsyms
//     (mod->kallsyms: an Elf64_Sym table, its strings and one nm letter
//     per symbol), so no .ko is needed to find rmd160_final; types of the
//     module's own structs come from its .ko given with --symbols (split
//     BTF on the vmlinux's, or DWARF).
//   - its build ID is read from its notes in guest memory (notes_attrs,
//     as /sys/module/NAME/notes), so a pack's build is checked against
//     the module the guest loaded, not a file given with --symbols.
//   - the places where the list changes (engine.OS.Rendezvous) are
//     do_init_module, which the kernel keeps out of line for debuggers
//     (the module placed, its kallsyms set, state COMING, its init not
//     run yet: probes go in before init), and free_module (state GOING,
//     before the module's memory is freed: its breakpoints are dropped
//     without writing into that memory). One hidden stop per module load
//     and one per unload; only once a module other than the image has
//     been asked for.
//
// Probes in a module's init text are refused: that text is freed after
// init, and Exec is the core text only.

// Module states (enum module_state).
const (
	modLive     = 0
	modComing   = 1
	modGoing    = 2
	modUnformed = 3
)

// Sizes of what is read from struct module and mod_kallsyms.
const (
	moduleNameLen = 56      // MODULE_NAME_LEN on 64-bit kernels
	elfSymSize    = 24      // sizeof(Elf64_Sym)
	maxModSyms    = 1 << 20 // a module with more symbols is taken as garbage
	maxModules    = 4096    // the list walked at most this far
)

// modLayout is where the fields gprobes reads are in struct module and
// struct mod_kallsyms, and where the module list is.
type modLayout struct {
	head                               uint64 // &modules, slid
	list, name, state                  uint64
	textBase, textSize                 field
	kallsyms                           uint64
	symtab, numSymtab, strtab, typetab field
	span                               uint64 // bytes of struct module read per entry: state, list, name
	notes                              *notesLayout
}

// notesLayout is where a module's ELF notes are found: struct module's
// notes_attrs (set by mod_sysfs_setup, before do_init_module), an array
// of bin_attributes, one per SHF_ALLOC note section, whose private is the
// section in the module's memory (what /sys/module/NAME/notes/ reads).
// nil when the kernel's types lack them (no CONFIG_SYSFS or KALLSYMS):
// then a module's build ID is not known.
type notesLayout struct {
	ptr              uint64 // struct module.notes_attrs
	count, attrs     uint64 // struct module_notes_attrs.notes, .attrs
	attrSize         uint64 // sizeof(struct bin_attribute)
	name, size, data uint64 // bin_attribute.attr.name, .size, .private
}

// Bounds on what a module's notes are read as.
const (
	maxModNotes    = 32   // note sections of one module
	maxModNoteSize = 4096 // bytes of one
)

// layout works out the offsets once per set of symbols.
func (k *Kernel) modLayout() (*modLayout, error) {
	if k.mods != nil || k.modsErr != nil {
		return k.mods, k.modsErr
	}
	k.mods, k.modsErr = newModLayout(k.syms, k.slide)
	return k.mods, k.modsErr
}

func newModLayout(s *symbols.Set, slide uint64) (*modLayout, error) {
	if s == nil {
		return nil, errors.New("no symbols for the kernel: give System.map (or a kallsyms copy) and a vmlinux with BTF or DWARF with --symbols")
	}
	head, err := s.Lookup("modules")
	if err != nil {
		return nil, fmt.Errorf("no `modules` symbol (the kernel's module list: %v): give System.map or a kallsyms copy with --symbols", err)
	}
	l := &modLayout{head: head.Addr + slide}
	var errs []error
	off := func(typ, name string) uint64 {
		o, err := s.Offsetof(typ, name)
		if err != nil {
			errs = append(errs, err)
		}
		return o
	}
	fld := func(f *field, typ, name string) bool {
		o, size, err := s.Field(typ, name)
		f.off, f.size = o, size
		return err == nil
	}
	l.list = off("struct module", "list")
	l.name = off("struct module", "name")
	l.state = off("struct module", "state")
	l.kallsyms = off("struct module", "kallsyms")
	switch {
	case fld(&l.textBase, "struct module", "core_layout.base") && fld(&l.textSize, "struct module", "core_layout.text_size"):
	case fld(&l.textBase, "struct module", "mem[0].base") && fld(&l.textSize, "struct module", "mem[0].size"):
	default:
		errs = append(errs, errors.New("struct module has neither core_layout (Linux 6.3 and before) nor mem[] (6.4 and later)"))
	}
	if !fld(&l.symtab, "struct mod_kallsyms", "symtab") || !fld(&l.numSymtab, "struct mod_kallsyms", "num_symtab") ||
		!fld(&l.strtab, "struct mod_kallsyms", "strtab") || !fld(&l.typetab, "struct mod_kallsyms", "typetab") {
		errs = append(errs, errors.New("no struct mod_kallsyms {symtab, num_symtab, strtab, typetab}"))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("the kernel's struct module is not known (%v): give the vmlinux (its .BTF, or DWARF) with --symbols", errors.Join(errs...))
	}
	l.span = max(l.state+4, l.list+8, l.name+moduleNameLen)
	l.notes = newNotesLayout(s)
	return l, nil
}

func newNotesLayout(s *symbols.Set) *notesLayout {
	var n notesLayout
	var err error
	for _, f := range []struct {
		to        *uint64
		typ, path string
	}{
		{&n.ptr, "struct module", "notes_attrs"},
		{&n.count, "struct module_notes_attrs", "notes"},
		{&n.attrs, "struct module_notes_attrs", "attrs"},
		{&n.name, "struct bin_attribute", "attr.name"},
		{&n.size, "struct bin_attribute", "size"},
		{&n.data, "struct bin_attribute", "private"},
	} {
		if *f.to, err = s.Offsetof(f.typ, f.path); err != nil {
			return nil
		}
	}
	if n.attrSize, err = s.Sizeof("struct bin_attribute"); err != nil || n.attrSize < max(n.name, n.size, n.data)+8 {
		return nil
	}
	return &n
}

// moduleBuildID reads the GNU build ID among a loaded module's notes in
// guest memory; nil when the kernel's types do not say where they are,
// the module has none, or what is read does not look like notes.
func (k *Kernel) moduleBuildID(mod uint64) []byte {
	n := k.mods.notes
	if n == nil {
		return nil
	}
	var b [8]byte
	if k.mem.ReadMem(mod+n.ptr, b[:]) != nil {
		return nil
	}
	attrs := binary.LittleEndian.Uint64(b[:])
	if attrs == 0 {
		return nil // not set up yet, or no notes
	}
	if k.mem.ReadMem(attrs+n.count, b[:4]) != nil {
		return nil
	}
	count := uint64(binary.LittleEndian.Uint32(b[:4]))
	if count == 0 || count > maxModNotes {
		return nil
	}
	arr := make([]byte, count*n.attrSize)
	if k.mem.ReadMem(attrs+n.attrs, arr) != nil {
		return nil
	}
	for i := uint64(0); i < count; i++ {
		a := arr[i*n.attrSize:]
		addr, size := binary.LittleEndian.Uint64(a[n.data:]), binary.LittleEndian.Uint64(a[n.size:])
		if addr == 0 || size < 16 || size > maxModNoteSize {
			continue
		}
		note := make([]byte, size)
		if k.mem.ReadMem(addr, note) != nil {
			continue
		}
		if id := symbols.NotesBuildID(note); id != nil {
			return id
		}
	}
	return nil
}

// guestModule is one entry of the guest's module list.
type guestModule struct {
	addr     uint64 // the struct module
	state    uint32
	name     string
	textBase uint64
	textSize uint64
	kallsyms uint64
}

// ModuleName is a DPDF module name as the kernel spells a module: without
// ".ko", dashes as underscores (modprobe's rule).
func ModuleName(name string) string {
	return strings.ReplaceAll(strings.TrimSuffix(name, ".ko"), "-", "_")
}

func (k *Kernel) u64(b []byte, f field) uint64 {
	switch f.size {
	case 4:
		return uint64(binary.LittleEndian.Uint32(b[f.off:]))
	case 2:
		return uint64(binary.LittleEndian.Uint16(b[f.off:]))
	}
	return binary.LittleEndian.Uint64(b[f.off:])
}

// findModule walks the guest's module list for name; nil when it is not
// in the list (in any state).
func (k *Kernel) findModule(name string) (*guestModule, error) {
	l, err := k.modLayout()
	if err != nil {
		return nil, err
	}
	var p [8]byte
	if err := k.mem.ReadMem(l.head, p[:]); err != nil {
		return nil, fmt.Errorf("read the module list at %#x: %w", l.head, err)
	}
	buf := make([]byte, l.span)
	for next, n := binary.LittleEndian.Uint64(p[:]), 0; next != l.head; n++ {
		if n == maxModules || next == 0 {
			return nil, fmt.Errorf("the module list at %#x does not come back to its head: are the symbols of this kernel?", l.head)
		}
		mod := next - l.list
		if err := k.mem.ReadMem(mod, buf); err != nil {
			return nil, fmt.Errorf("read struct module at %#x: %w", mod, err)
		}
		next = binary.LittleEndian.Uint64(buf[l.list:])
		nm := buf[l.name : l.name+moduleNameLen]
		if i := strings.IndexByte(string(nm), 0); i >= 0 {
			nm = nm[:i]
		}
		if string(nm) != name {
			continue
		}
		m := &guestModule{addr: mod, state: binary.LittleEndian.Uint32(buf[l.state:]), name: name}
		var b [16]byte
		if err := k.mem.ReadMem(mod+l.textBase.off, b[:8]); err != nil {
			return nil, fmt.Errorf("read %s's struct module: %w", name, err)
		}
		m.textBase = binary.LittleEndian.Uint64(b[:8])
		if err := k.mem.ReadMem(mod+l.textSize.off, b[:l.textSize.size]); err != nil {
			return nil, fmt.Errorf("read %s's struct module: %w", name, err)
		}
		m.textSize = k.u64(b[:], field{size: l.textSize.size})
		if err := k.mem.ReadMem(mod+l.kallsyms, b[:8]); err != nil {
			return nil, fmt.Errorf("read %s's struct module: %w", name, err)
		}
		m.kallsyms = binary.LittleEndian.Uint64(b[:8])
		return m, nil
	}
	return nil, nil
}

// modKey identifies what a module's symbols were read from: the same
// module at the same place with the same kallsyms gives the same table.
type modKey struct {
	addr, textBase, textSize, kallsyms, symtab, strtab uint64
	num                                                uint64
}

// resolveModule finds a kernel module in the guest: ok false while it is
// not loaded (not in the list, or being freed).
func (k *Kernel) resolveModule(name string) (*engine.Loaded, bool, error) {
	k.wantModules = true
	name = ModuleName(name)
	m, err := k.findModule(name)
	if err != nil || m == nil {
		return nil, false, err
	}
	if m.state != modLive && m.state != modComing {
		return nil, false, nil // GOING (its exit runs, then free_module) or UNFORMED
	}
	l := k.mods
	kb := make([]byte, max(l.symtab.off+8, l.numSymtab.off+l.numSymtab.size, l.strtab.off+8, l.typetab.off+8))
	if err := k.mem.ReadMem(m.kallsyms, kb); err != nil {
		return nil, false, fmt.Errorf("read %s's kallsyms at %#x: %w", name, m.kallsyms, err)
	}
	key := modKey{addr: m.addr, textBase: m.textBase, textSize: m.textSize, kallsyms: m.kallsyms,
		symtab: k.u64(kb, l.symtab), strtab: k.u64(kb, l.strtab), num: k.u64(kb, l.numSymtab)}
	if ld := k.modCache[key]; ld != nil {
		return ld, true, nil
	}
	tab, err := k.moduleSymbols(name, key.symtab, key.strtab, k.u64(kb, l.typetab), key.num)
	if err != nil {
		return nil, false, err
	}
	tables := []*symbols.Table{tab}
	for _, t := range k.syms.Tables() {
		if f := t.Format(); f == symbols.FormatSystemMap || f == symbols.FormatKallsyms {
			// the image's names: a static function of the module may
			// share one, and the module's own is meant
			continue
		}
		if filepath.Ext(t.Path()) == ".ko" {
			if ModuleName(filepath.Base(t.Path())) != name {
				continue // another module's types
			}
		}
		tables = append(tables, t)
	}
	lo, hi := m.textBase, m.textBase+m.textSize
	ld := &engine.Loaded{
		Key:   "kernel module " + name,
		Ident: fmt.Sprintf("struct module %#x, text %#x", m.addr, m.textBase),
		// the module's symbols are kept at their addresses minus the
		// slide, beside the image's link-time ones: one bias for both
		Bias:    k.slide,
		Symbols: symbols.NewSet(tables...),
		// the build ID of the module the guest loaded, from its notes in
		// guest memory (not from a file given with --symbols, which may
		// be another build); nil when they cannot be read: a pack of one
		// build is then taken, one of several refused for want of the ID
		BuildID: k.moduleBuildID(m.addr),
		Exec:    func(a uint64) bool { return a >= lo && a < hi },
	}
	if k.modCache == nil {
		k.modCache = map[modKey]*engine.Loaded{}
	}
	k.modCache[key] = ld
	return ld, true, nil
}

// moduleSymbols reads a module's kallsyms from guest memory: its symbols
// at their addresses minus the slide, with their sizes and nm letters.
func (k *Kernel) moduleSymbols(name string, symtab, strtab, typetab, num uint64) (*symbols.Table, error) {
	if num == 0 || num > maxModSyms || symtab == 0 || strtab == 0 || typetab == 0 {
		return nil, fmt.Errorf("kernel module %s: its kallsyms (%d symbols at %#x) look wrong", name, num, symtab)
	}
	st := make([]byte, num*elfSymSize)
	if err := k.mem.ReadMem(symtab, st); err != nil {
		return nil, fmt.Errorf("read kernel module %s's symbols at %#x: %w", name, symtab, err)
	}
	types := make([]byte, num)
	if err := k.mem.ReadMem(typetab, types); err != nil {
		return nil, fmt.Errorf("read kernel module %s's symbol types at %#x: %w", name, typetab, err)
	}
	var maxName uint64
	for i := uint64(1); i < num; i++ {
		maxName = max(maxName, uint64(binary.LittleEndian.Uint32(st[i*elfSymSize:])))
	}
	// the strings in one read, past the last one's start by a long name;
	// where that crosses the end of the mapping, one read per name
	strs := make([]byte, maxName+512)
	whole := k.mem.ReadMem(strtab, strs) == nil
	nameAt := func(off uint64) string {
		var b []byte
		if whole {
			b = strs[off:]
		} else {
			n := min(512, 4096-(strtab+off)%4096)
			b = make([]byte, n)
			if k.mem.ReadMem(strtab+off, b) != nil {
				return ""
			}
		}
		if i := strings.IndexByte(string(b), 0); i >= 0 {
			return string(b[:i])
		}
		return ""
	}
	var syms []symbols.Symbol
	for i := uint64(1); i < num; i++ {
		e := st[i*elfSymSize:]
		kind := types[i]
		value := binary.LittleEndian.Uint64(e[8:])
		if kind == 'U' || kind == 'u' || value == 0 || binary.LittleEndian.Uint32(e) == 0 {
			continue // undefined (resolved against the kernel), or unnamed
		}
		n := nameAt(uint64(binary.LittleEndian.Uint32(e)))
		if n == "" {
			continue
		}
		syms = append(syms, symbols.Symbol{Name: n, Addr: value - k.slide, Size: binary.LittleEndian.Uint64(e[16:]), Kind: kind, Module: name})
	}
	if len(syms) == 0 {
		return nil, fmt.Errorf("kernel module %s: no symbols in its kallsyms", name)
	}
	return symbols.NewTable("kallsyms of kernel module "+name+" (guest memory)", syms), nil
}

// rendezvous is where the guest's module list changes: do_init_module
// and free_module, once a module other than the image was asked for.
func (k *Kernel) rendezvous() []uint64 {
	if !k.wantModules || k.syms == nil || !k.slideOK {
		return nil
	}
	if _, err := k.modLayout(); err != nil {
		return nil
	}
	var out []uint64
	for _, fn := range []string{"do_init_module", "free_module"} {
		s, err := k.syms.Lookup(fn)
		if err != nil {
			return nil // both or none: a load without its unload would leave breakpoints in freed memory
		}
		out = append(out, s.Addr+k.slide)
	}
	return out
}
