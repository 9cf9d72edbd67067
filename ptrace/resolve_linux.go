package ptrace

import (
	"debug/elf"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/symbols"
)

// What a process target says about modules: DPDF names are matched
// against the process's mappings, symbols come from the mapped file's ELF.

func (tg *Target) InsertBreakpoint(space int, addr uint64, orig []byte) error {
	return tg.WriteMem(space, addr, []byte{0xcc})
}

func (tg *Target) RemoveBreakpoint(space int, addr uint64, orig []byte) error {
	return tg.WriteMem(space, addr, orig[:1])
}

// TrapPC: an int3 stops the thread after itself.
func (tg *Target) TrapPC(tid int, rip uint64) uint64 { return rip - 1 }

func (tg *Target) Kernel() bool { return false }

func (tg *Target) Check(m *rpn.Module) string {
	if m.ModType == rpn.ModKernel {
		return "modtype = kernel: this target is a process; probe a kernel through a gdb: or xen: target"
	}
	if m.Arch != rpn.ArchX86_64 {
		return "arch = i386: gprobes traces x86_64 processes"
	}
	if where, ok := engine.UsesIO(m); ok {
		return fmt.Sprintf("port IO (%s): a process has no IO space", where)
	}
	return ""
}

// Resolve finds the module's file among the mappings: the same file after
// resolving symlinks, or the same base name when the DPDF gives no
// directory.
func (tg *Target) Resolve(space int, name string, modtype rpn.ModType) (*engine.Loaded, bool, error) {
	maps, err := Maps(space)
	if err != nil {
		return nil, false, err
	}
	path, ok := findModule(name, maps)
	if !ok {
		return nil, false, nil
	}
	bias, err := loadBias(path, maps)
	if err != nil {
		return nil, false, err
	}
	ld := &engine.Loaded{Key: path, Bias: bias}
	if set, err := openSymbols(path); err == nil {
		ld.Symbols = set
		ld.BuildID = set.BuildID()
	}
	var exec [][2]uint64
	for _, m := range maps {
		if m.Path == path && m.Exec() {
			exec = append(exec, [2]uint64{m.Start, m.End})
		}
	}
	ld.Exec = func(addr uint64) bool {
		for _, r := range exec {
			if addr >= r[0] && addr < r[1] {
				return true
			}
		}
		return false
	}
	return ld, true, nil
}

func findModule(name string, maps []Mapping) (string, bool) {
	want := name
	if strings.Contains(name, "/") {
		if abs, err := filepath.Abs(name); err == nil {
			want = abs
		}
		if real, err := filepath.EvalSymlinks(want); err == nil {
			want = real
		}
	}
	seen := map[string]bool{}
	for _, m := range maps {
		if m.Path == "" || m.Path[0] != '/' || seen[m.Path] {
			continue
		}
		seen[m.Path] = true
		if !strings.Contains(name, "/") {
			if filepath.Base(m.Path) == name {
				return m.Path, true
			}
			continue
		}
		if m.Path == want {
			return m.Path, true
		}
		if real, err := filepath.EvalSymlinks(m.Path); err == nil && real == want {
			return m.Path, true
		}
	}
	return "", false
}

// loadBias is where a file is loaded minus where it was linked: the
// mapping that holds a PT_LOAD segment's file offset starts at that
// segment's address plus the bias.
func loadBias(path string, maps []Mapping) (uint64, error) {
	f, err := elf.Open(path)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	for _, m := range maps {
		if m.Path != path {
			continue
		}
		for _, prog := range f.Progs {
			if prog.Type != elf.PT_LOAD {
				continue
			}
			if m.Offset == prog.Off&^0xfff {
				return m.Start - (prog.Vaddr &^ 0xfff), nil
			}
		}
	}
	return 0, fmt.Errorf("%s: no mapping matches its segments", path)
}

// symbols of mapped files, cached by path for the life of the program
var symCache = struct {
	sync.Mutex
	m map[string]*symbols.Set
}{m: map[string]*symbols.Set{}}

func openSymbols(path string) (*symbols.Set, error) {
	symCache.Lock()
	defer symCache.Unlock()
	if s, ok := symCache.m[path]; ok {
		return s, nil
	}
	t, err := symbols.Open(path)
	if err != nil {
		return nil, err
	}
	s := symbols.NewSet(t)
	symCache.m[path] = s
	return s, nil
}

// Rendezvous is the dynamic linker's _dl_debug_state, which it calls after
// every change to the list of loaded objects.
func (tg *Target) Rendezvous(space int) (uint64, bool) {
	maps, err := Maps(space)
	if err != nil {
		return 0, false
	}
	for _, m := range maps {
		base := filepath.Base(m.Path)
		if !strings.HasPrefix(base, "ld-linux") && !strings.HasPrefix(base, "ld64") && !strings.HasPrefix(base, "ld-") {
			continue
		}
		set, err := openSymbols(m.Path)
		if err != nil {
			return 0, false
		}
		sym, err := set.Lookup("_dl_debug_state")
		if err != nil {
			return 0, false
		}
		bias, err := loadBias(m.Path, maps)
		if err != nil {
			return 0, false
		}
		return sym.Addr + bias, true
	}
	return 0, false
}

func (tg *Target) Writable(space int, addr uint64) bool {
	maps, err := Maps(space)
	if err != nil {
		return false
	}
	for _, m := range maps {
		if addr >= m.Start && addr < m.End {
			return len(m.Perm) > 1 && m.Perm[1] == 'w'
		}
	}
	return false
}

func (tg *Target) Sys(tid int, regs *engine.Regs, v rpn.SysValue) (uint64, bool) {
	th := tg.t.Thread(tid)
	if th == nil {
		return 0, false
	}
	switch v {
	case rpn.SysPID:
		return uint64(th.Pid), true
	case rpn.SysTID:
		return uint64(tid), true
	case rpn.SysProcID:
		return uint64(th.Index), true
	}
	return 0, false
}

// UserReg: in a process the user-mode registers are the thread's own.
func (tg *Target) UserReg(tid int, regs *engine.Regs, r rpn.Reg) (uint64, bool) {
	if r >= rpn.RegCR0 {
		return 0, false
	}
	return regs[r], true
}
