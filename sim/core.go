package sim

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/gprobes/gprobes/rpn"
)

// Register order of the general registers in an x86_64 core's
// NT_PRSTATUS (struct user_regs_struct), and of an i386 one.
var (
	coreRegs64 = []rpn.Reg{
		rpn.RegR15, rpn.RegR14, rpn.RegR13, rpn.RegR12, rpn.RegRBP, rpn.RegRBX, rpn.RegR11, rpn.RegR10,
		rpn.RegR9, rpn.RegR8, rpn.RegRAX, rpn.RegRCX, rpn.RegRDX, rpn.RegRSI, rpn.RegRDI, 0xffff, /* orig_rax */
		rpn.RegRIP, rpn.RegCS, rpn.RegRFLAGS, rpn.RegRSP, rpn.RegSS, rpn.RegFSBase, rpn.RegGSBase,
		rpn.RegDS, rpn.RegES, rpn.RegFS, rpn.RegGS,
	}
	coreRegs32 = []rpn.Reg{
		rpn.RegRBX, rpn.RegRCX, rpn.RegRDX, rpn.RegRSI, rpn.RegRDI, rpn.RegRBP, rpn.RegRAX,
		rpn.RegDS, rpn.RegES, rpn.RegFS, rpn.RegGS, 0xffff, /* orig_eax */
		rpn.RegRIP, rpn.RegCS, rpn.RegRFLAGS, rpn.RegRSP, rpn.RegSS,
	}
)

// Offsets in struct elf_prstatus and elf_prpsinfo.
const (
	prstatusPID64 = 32
	prstatusReg64 = 112
	prpsinfoPID64 = 24
	prstatusPID32 = 24
	prstatusReg32 = 72
	prpsinfoPID32 = 12
)

// LoadCore takes the registers of the first thread, the pid and tid, and
// every dumped memory segment of an ELF core file (as written by the
// kernel or by gdb's gcore). Segments the core did not dump (file size
// smaller than memory size) stay unreadable.
func (e *Env) LoadCore(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("core %s: %w", path, err)
	}
	defer f.Close()
	if f.Type != elf.ET_CORE {
		return fmt.Errorf("core %s: an ELF %s, not a core file", path, f.Type)
	}
	if f.Machine != elf.EM_X86_64 && f.Machine != elf.EM_386 {
		return fmt.Errorf("core %s: machine %s: gprobes reads x86_64 and i386 cores", path, f.Machine)
	}
	is64 := f.Class == elf.ELFCLASS64
	threads := 0
	for _, p := range f.Progs {
		switch p.Type {
		case elf.PT_LOAD:
			if p.Filesz == 0 {
				continue
			}
			data := make([]byte, p.Filesz)
			if _, err := io.ReadFull(p.Open(), data); err != nil {
				return fmt.Errorf("core %s: segment at %#x: %w", path, p.Vaddr, err)
			}
			if err := e.AddMem(p.Vaddr, data); err != nil {
				return fmt.Errorf("core %s: %w", path, err)
			}
		case elf.PT_NOTE:
			notes := make([]byte, p.Filesz)
			if _, err := io.ReadFull(p.Open(), notes); err != nil {
				return fmt.Errorf("core %s: notes: %w", path, err)
			}
			if err := e.coreNotes(notes, f.ByteOrder, is64, &threads); err != nil {
				return fmt.Errorf("core %s: %w", path, err)
			}
		}
	}
	if threads == 0 {
		return fmt.Errorf("core %s: no NT_PRSTATUS note: no registers", path)
	}
	return nil
}

func (e *Env) coreNotes(b []byte, bo binary.ByteOrder, is64 bool, threads *int) error {
	for len(b) >= 12 {
		namesz, descsz, typ := bo.Uint32(b), bo.Uint32(b[4:]), bo.Uint32(b[8:])
		b = b[12:]
		nlen := (uint64(namesz) + 3) &^ 3
		dlen := (uint64(descsz) + 3) &^ 3
		if nlen > uint64(len(b)) || uint64(descsz) > uint64(len(b))-nlen {
			return fmt.Errorf("malformed note")
		}
		desc := b[nlen : nlen+uint64(descsz)]
		if nlen+dlen > uint64(len(b)) {
			b = nil
		} else {
			b = b[nlen+dlen:]
		}
		switch elf.NType(typ) {
		case elf.NT_PRSTATUS:
			*threads++
			if *threads > 1 {
				continue
			}
			regs, pidOff, regOff, size := coreRegs32, prstatusPID32, prstatusReg32, 4
			if is64 {
				regs, pidOff, regOff, size = coreRegs64, prstatusPID64, prstatusReg64, 8
			}
			if len(desc) < regOff+len(regs)*size {
				return fmt.Errorf("NT_PRSTATUS note of %d bytes is too short", len(desc))
			}
			e.SetSys(rpn.SysTID, uint64(bo.Uint32(desc[pidOff:])))
			if !e.haveSys[rpn.SysPID] {
				e.SetSys(rpn.SysPID, uint64(bo.Uint32(desc[pidOff:])))
			}
			for i, r := range regs {
				if r == 0xffff {
					continue
				}
				var v uint64
				if size == 8 {
					v = bo.Uint64(desc[regOff+8*i:])
				} else {
					v = uint64(bo.Uint32(desc[regOff+4*i:]))
				}
				e.regs[r] = v
			}
		case elf.NT_PRPSINFO:
			off := prpsinfoPID32
			if is64 {
				off = prpsinfoPID64
			}
			if len(desc) >= off+4 {
				e.SetSys(rpn.SysPID, uint64(bo.Uint32(desc[off:])))
			}
		}
	}
	return nil
}
