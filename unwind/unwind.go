// Package unwind walks the user stack of a stopped x86_64 thread (log
// ustack): with the DWARF call frame information of each mapped module
// (.eh_frame, else .debug_frame), parsed with delve's pkg/dwarf/frame,
// so code built without frame pointers (gcc -O2's default) unwinds; with
// the frame-pointer chain only where a module has no CFI for the address.
// It names the frames it found as function+offset (module) from the
// modules' symbol tables (package symbols).
//
// It reads the target only through a Memory function, and knows the
// process's modules only through a Modules list (a process's
// /proc/PID/maps), so it runs the same on a live process and in tests.
package unwind

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/go-delve/delve/pkg/dwarf/frame"
	"github.com/gprobes/gprobes/symbols"
)

// DWARF register numbers of x86_64 (System V psABI, figure 3.36).
const (
	RAX = 0
	RDX = 1
	RCX = 2
	RBX = 3
	RSI = 4
	RDI = 5
	RBP = 6
	RSP = 7
	R8  = 8
	R15 = 15
	RIP = 16 // the return address column

	NumRegs = 17
)

// Regs are a thread's registers by DWARF number (RAX ... R15, RIP).
type Regs [NumRegs]uint64

// Memory reads len(p) bytes of the target at addr; false when it cannot.
type Memory func(addr uint64, p []byte) bool

// Mapping is one executable file mapping of the process: the runtime
// range [Start, End) of its code and the file offset mapped at Start; the
// file's path, and its device and inode (a file replaced at the same path
// since is another file: its CFI and symbols are read anew).
type Mapping struct {
	Start, End uint64
	Offset     uint64
	Path       string
	Dev        string
	Inode      uint64
}

// Frame is one frame found: its address, and its name where the module
// has one.
type Frame struct {
	PC       uint64
	Function string
	Offset   uint64 // PC - the function's start
	Module   string // the file mapped there
}

// Unwinder keeps the parsed CFI and symbol tables of the files it has
// met, for every process it unwinds. Safe for concurrent use.
type Unwinder struct {
	mu    sync.Mutex
	files map[string]*file
}

// New returns an empty Unwinder.
func New() *Unwinder { return &Unwinder{files: map[string]*file{}} }

// file is what one ELF file gives: its loadable segments (to turn a
// runtime address into the file's own), its CFI and its symbols.
type file struct {
	mu    sync.Mutex // rows
	rows  map[uint64]*row
	loads []elf.ProgHeader
	fdes  frame.FrameDescriptionEntries
	syms  *symbols.Set
	err   error
}

func (u *Unwinder) file(m *Mapping) *file {
	key := fmt.Sprintf("%s\x00%s\x00%d", m.Path, m.Dev, m.Inode)
	u.mu.Lock()
	defer u.mu.Unlock()
	if f, ok := u.files[key]; ok {
		return f
	}
	f := loadFile(m.Path)
	u.files[key] = f
	return f
}

func loadFile(path string) *file {
	f := &file{}
	ef, err := elf.Open(path)
	if err != nil {
		f.err = err
		return f
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			f.loads = append(f.loads, p.ProgHeader)
		}
	}
	// .eh_frame is what the runtime unwinds C++ exceptions with: every
	// gcc and clang object has it unless built with
	// -fno-asynchronous-unwind-tables; .debug_frame where it does not
	if s := ef.Section(".eh_frame"); s != nil && s.Type != elf.SHT_NOBITS {
		if b, err := s.Data(); err == nil {
			f.fdes, err = parseFrames(b, s.Addr, true)
			if err != nil {
				f.err = fmt.Errorf("%s: .eh_frame: %w", path, err)
			}
		}
	}
	if len(f.fdes) == 0 {
		if s := ef.Section(".debug_frame"); s != nil && s.Type != elf.SHT_NOBITS {
			if b, err := s.Data(); err == nil {
				f.fdes, _ = parseFrames(b, 0, false)
			}
		}
	}
	if t, err := symbols.Open(path); err == nil {
		f.syms = symbols.NewSet(t)
		// a distribution's separate debug file has the local functions a
		// stripped library's .dynsym lacks (libc's
		// __libc_start_call_main); its addresses are the same
		if id := t.BuildID(); len(id) > 1 {
			dbg := fmt.Sprintf("%s/.build-id/%02x/%x.debug", DebugDir, id[0], id[1:])
			if d, err := symbols.Open(dbg); err == nil {
				f.syms.Add(d)
			}
		}
	}
	return f
}

// DebugDir is where separate debug files are looked up by build ID.
var DebugDir = "/usr/lib/debug"

// parseFrames parses CFI, turning a panic of the parser on a malformed
// section into an error: a module's bad CFI must not take gprobes down.
// The FDEs come sorted by address (FDEForPC searches them; the parser
// keeps the section's order, which the linker need not sort).
func parseFrames(b []byte, addr uint64, eh bool) (fdes frame.FrameDescriptionEntries, err error) {
	defer func() {
		if r := recover(); r != nil {
			fdes, err = nil, fmt.Errorf("malformed: %v", r)
		}
		sort.SliceStable(fdes, func(i, j int) bool { return fdes[i].Begin() < fdes[j].Begin() })
	}()
	if eh {
		if addr == 0 {
			addr = 1 // delve tells .eh_frame from .debug_frame by a non-zero address
		}
		return frame.Parse(b, binary.LittleEndian, 0, 8, addr)
	}
	return frame.Parse(b, binary.LittleEndian, 0, 8, 0)
}

// bias is what to subtract from a runtime address of mapping m to get the
// file's own (link-time) address.
func (f *file) bias(m *Mapping) (uint64, bool) {
	for _, p := range f.loads {
		if m.Offset >= p.Off && m.Offset < p.Off+p.Filesz {
			vaddr := p.Vaddr + (m.Offset - p.Off)
			return m.Start - vaddr, true
		}
	}
	return 0, false
}

// Modules is the executable mappings of a process, sorted by Start.
type Modules []Mapping

// Sort sorts the mappings by start.
func (ms Modules) Sort() { sort.Slice(ms, func(i, j int) bool { return ms[i].Start < ms[j].Start }) }

// At finds the mapping holding addr.
func (ms Modules) At(addr uint64) (*Mapping, bool) {
	i := sort.Search(len(ms), func(i int) bool { return ms[i].End > addr })
	if i < len(ms) && ms[i].Start <= addr {
		return &ms[i], true
	}
	return nil, false
}

// errStop ends a walk.
var errStop = errors.New("end of the stack")

// Unwind walks the stack of a thread stopped with registers regs (rip the
// address it is at) in a process with the mappings mods, writing the
// frames' addresses into pcs, innermost first: rip, then each caller's
// return address. It returns how many it found: it stops at the end of
// the stack (a frame whose CFI says the return address is undefined, as
// _start's and clone's do), at an address in no module, at a stack that
// does not grow towards the caller, at memory it cannot read, or when
// pcs is full. missing reports that some address was in no mapping of
// mods (the frame-pointer chain was tried there): the caller may read
// the maps again and retry. Bit i of exact is set when frame i's address
// is where the code was, not a return address: frame 0, and the frame a
// signal interrupted (found through the signal frame, whose CIE says S);
// Name looks those up at the address itself.
//
// A signal frame's CFA and registers come by DWARF expressions (the
// ucontext on the stack, libc's __restore_rt), evaluated as a PLT
// entry's; the stack pointer may go down past one (sigaltstack).
func (u *Unwinder) Unwind(regs Regs, mem Memory, mods Modules, pcs []uint64) (n int, missing bool, exact uint64) {
	mem = pages(mem)
	var valid [NumRegs]bool
	for i := range valid {
		valid[i] = true
	}
	exact = 1
	for n < len(pcs) {
		pc := regs[RIP]
		if pc == 0 {
			break
		}
		pcs[n] = pc
		n++
		if n == len(pcs) {
			break
		}
		// a caller's return address may be just past its function (a
		// call to a noreturn function): look the caller up at the call
		look := pc
		if exact&(1<<(n-1)) == 0 {
			look--
		}
		next, nvalid, signal, inMod, err := u.step(regs, valid, look, mem, mods)
		if !inMod {
			missing = true
		}
		if err != nil {
			break
		}
		if next[RSP] <= regs[RSP] && !signal {
			break // the stack grows down: a caller's frame is above
		}
		if signal && n < 64 {
			exact |= 1 << n
		}
		regs, valid = next, nvalid
	}
	return n, missing, exact & (1<<n - 1)
}

// step computes the caller's registers from the frame at look.
// inMod is false when look is in no mapping: code in no file (a JIT's),
// where only the frame-pointer chain can be followed.
func (u *Unwinder) step(regs Regs, valid [NumRegs]bool, look uint64, mem Memory, mods Modules) (out Regs, ovalid [NumRegs]bool, signal, inMod bool, err error) {
	m, ok := mods.At(look)
	if !ok {
		out, ovalid, err = fpStep(regs, valid, mem)
		return out, ovalid, false, false, err
	}
	f := u.file(m)
	if bias, ok := f.bias(m); ok && len(f.fdes) > 0 {
		if fde, err := f.fdes.FDEForPC(look - bias); err == nil {
			out, ovalid, signal, err = f.cfiStep(fde, look-bias, regs, valid, mem)
			return out, ovalid, signal, true, err
		}
	}
	out, ovalid, err = fpStep(regs, valid, mem)
	return out, ovalid, false, true, err
}

// pages reads through mem a page at a time and keeps the pages of one
// walk: a stack's frames are close together, and each read of a traced
// process is a system call. A page that cannot be read whole is read
// word by word.
func pages(mem Memory) Memory {
	const size = 4096
	cache := map[uint64]*[size]byte{}
	return func(addr uint64, p []byte) bool {
		for len(p) > 0 {
			base := addr &^ (size - 1)
			pg, ok := cache[base]
			if !ok {
				pg = new([size]byte)
				if !mem(base, pg[:]) {
					pg = nil
				}
				cache[base] = pg
			}
			off := addr - base
			n := min(uint64(len(p)), size-off)
			if pg == nil {
				if !mem(addr, p[:n]) {
					return false
				}
			} else {
				copy(p[:n], pg[off:])
			}
			p, addr = p[n:], addr+n
		}
		return true
	}
}

func read64(mem Memory, addr uint64) (uint64, bool) {
	var b [8]byte
	if !mem(addr, b[:]) {
		return 0, false
	}
	return binary.LittleEndian.Uint64(b[:]), true
}

// row is the CFI of one address, as EstablishFrame computes it, kept per
// file: the rules of a function's instructions do not change, and
// computing them (delve runs the CIE's and FDE's programs) costs more
// than the rest of a step.
type row struct {
	expr   []byte // the CFA's expression, when it has one
	signal bool   // a signal frame's (the CIE's augmentation has S): the caller's address is where it was interrupted, not a return address
	cfaReg uint64
	cfaOff int64
	ra     uint64 // the return address column
	raSet  bool   // the column has a rule
	regs   [NumRegs]frame.DWRule
	has    [NumRegs]bool
}

// maxRows bounds the rows kept per file.
const maxRows = 4096

// rowAt is the row of pc (the file's address) in fde.
func (f *file) rowAt(fde *frame.FrameDescriptionEntry, pc uint64) (rw *row, err error) {
	f.mu.Lock()
	rw = f.rows[pc]
	f.mu.Unlock()
	if rw != nil {
		return rw, nil
	}
	defer func() {
		if r := recover(); r != nil {
			rw, err = nil, fmt.Errorf("CFI of %#x: %v", pc, r)
		}
	}()
	ctx, err := fde.EstablishFrame(pc)
	if err != nil {
		return nil, err
	}
	rw = &row{cfaReg: ctx.CFA.Reg, cfaOff: ctx.CFA.Offset, ra: ctx.RetAddrReg}
	switch ctx.CFA.Rule {
	case frame.RuleCFA:
	case frame.RuleExpression:
		rw.expr = append([]byte{}, ctx.CFA.Expression...)
	default:
		return nil, errStop
	}
	rw.signal = fde.CIE != nil && strings.Contains(fde.CIE.Augmentation, "S")
	for r, rule := range ctx.Regs {
		if r < NumRegs {
			rule.Expression = append([]byte(nil), rule.Expression...)
			rw.regs[r], rw.has[r] = rule, true
		}
	}
	if rw.ra < NumRegs {
		rw.raSet = rw.has[rw.ra]
	}
	f.mu.Lock()
	if f.rows == nil {
		f.rows = map[uint64]*row{}
	}
	if len(f.rows) < maxRows {
		f.rows[pc] = rw
	}
	f.mu.Unlock()
	return rw, nil
}

// cfiStep applies the CFI row of pc (the file's address). signal: the
// frame is a signal frame's.
func (f *file) cfiStep(fde *frame.FrameDescriptionEntry, pc uint64, regs Regs, valid [NumRegs]bool, mem Memory) (out Regs, ovalid [NumRegs]bool, signal bool, err error) {
	rw, err := f.rowAt(fde, pc)
	if err != nil {
		return regs, valid, false, err
	}
	if rw.ra >= NumRegs || !rw.raSet {
		return regs, valid, false, errStop
	}
	var cfa uint64
	switch {
	case rw.expr != nil:
		// a signal frame's (the ucontext's saved rsp), a PLT entry's
		if cfa, err = eval(rw.expr, &regs, &valid, mem); err != nil {
			return regs, valid, false, errStop
		}
	case rw.cfaReg >= NumRegs || !valid[rw.cfaReg]:
		return regs, valid, false, errStop
	default:
		cfa = regs[rw.cfaReg] + uint64(rw.cfaOff)
	}
	out, ovalid = regs, valid
	for r := range rw.regs {
		if !rw.has[r] {
			continue
		}
		rule := rw.regs[r]
		switch rule.Rule {
		case frame.RuleUndefined:
			if uint64(r) == rw.ra {
				return regs, valid, false, errStop // the outermost frame
			}
			// delve's DW_CFA_restore of a register the CIE leaves alone:
			// the same value (the psABI's rule for callee-saved ones)
		case frame.RuleSameVal:
		case frame.RuleOffset:
			v, ok := read64(mem, cfa+uint64(rule.Offset))
			if !ok {
				return regs, valid, false, errStop
			}
			out[r], ovalid[r] = v, true
		case frame.RuleValOffset:
			out[r], ovalid[r] = cfa+uint64(rule.Offset), true
		case frame.RuleRegister:
			if rule.Reg < NumRegs {
				out[r], ovalid[r] = regs[rule.Reg], valid[rule.Reg]
			}
		case frame.RuleExpression, frame.RuleValExpression:
			var ok bool
			v, err := eval(rule.Expression, &regs, &valid, mem, cfa)
			if err != nil {
				ovalid[r] = false
				continue
			}
			if rule.Rule == frame.RuleExpression {
				if v, ok = read64(mem, v); !ok {
					return regs, valid, false, errStop
				}
			}
			out[r], ovalid[r] = v, true
		default:
			ovalid[r] = false
		}
	}
	out[RIP], ovalid[RIP] = out[rw.ra], ovalid[rw.ra]
	if !rw.has[RSP] || rw.regs[RSP].Rule == frame.RuleUndefined || rw.regs[RSP].Rule == frame.RuleSameVal {
		out[RSP], ovalid[RSP] = cfa, true
	}
	if !ovalid[RIP] {
		return regs, valid, false, errStop
	}
	return out, ovalid, rw.signal, nil
}

// fpStep follows the frame-pointer chain one frame: rbp points at the
// saved rbp, the return address above it. Used where a module has no CFI
// for the address.
func fpStep(regs Regs, valid [NumRegs]bool, mem Memory) (Regs, [NumRegs]bool, error) {
	fp := regs[RBP]
	if !valid[RBP] || fp < regs[RSP] || fp&7 != 0 {
		return regs, valid, errStop
	}
	saved, ok1 := read64(mem, fp)
	ra, ok2 := read64(mem, fp+8)
	if !ok1 || !ok2 || ra == 0 {
		return regs, valid, errStop
	}
	out := regs
	out[RBP], out[RIP], out[RSP] = saved, ra, fp+16
	return out, valid, nil
}

// Name names the frames at pcs (as Unwind found them: the first the
// thread's address, the others return addresses, looked up at the call
// before them, but for those exact has (Unwind)) in a process with the
// mappings mods: function+offset and module, or only the module, or
// nothing.
func (u *Unwinder) Name(pcs []uint64, exact uint64, mods Modules) []Frame {
	out := make([]Frame, len(pcs))
	for i, pc := range pcs {
		out[i].PC = pc
		look := pc
		if i > 0 && (i >= 64 || exact&(1<<i) == 0) {
			look--
		}
		m, ok := mods.At(look)
		if !ok {
			continue
		}
		out[i].Module = m.Path
		f := u.file(m)
		bias, ok := f.bias(m)
		if !ok || f.syms == nil {
			continue
		}
		s, ok := f.syms.SymbolAt(look - bias)
		if !ok && look != pc {
			// a signal handler's return address: the first byte of the
			// sigreturn trampoline (its CFI starts a byte before it)
			s, ok = f.syms.SymbolAt(pc - bias)
		}
		if ok {
			out[i].Function = s.Name
			if at := strings.IndexByte(s.Name, '@'); at > 0 {
				out[i].Function = s.Name[:at] // __libc_start_main@GLIBC_2.2.5
			}
			out[i].Offset = pc - bias - s.Addr
		}
	}
	return out
}
