package ptrace

import (
	"debug/elf"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/engine/entries"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/symbols"
	"github.com/gprobes/gprobes/usdt"
)

// What a process target says about modules: DPDF names are matched
// against the process's mappings, symbols come from the mapped file's ELF.

// processOS is the engine's OS knowledge of Linux processes.
type processOS struct{ tg *Target }

var (
	_ engine.OS              = processOS{}
	_ engine.PendingReasoner = processOS{}
)

// OS: Linux processes.
func (tg *Target) OS() engine.OS { return processOS{tg} }

// InsertBreakpoint writes an int3, journaled first (journal_linux.go):
// an int3 that could not be journaled is not written, so a gprobes killed
// now leaves nothing that recovery does not know of.
func (tg *Target) InsertBreakpoint(space int, addr uint64, orig []byte) error {
	if err := tg.journalAdd(space, addr, orig[0]); err != nil {
		return err
	}
	if err := tg.WriteMem(space, addr, []byte{0xcc}); err != nil {
		return errors.Join(err, tg.journalRemove(space, addr))
	}
	return nil
}

// RemoveBreakpoint writes the original byte back, then journals it.
func (tg *Target) RemoveBreakpoint(space int, addr uint64, orig []byte) error {
	if err := tg.WriteMem(space, addr, orig[:1]); err != nil {
		return err
	}
	return tg.journalRemove(space, addr)
}

// Patch writes a jump pad's jump (every thread stopped by the engine),
// journaled first as InsertBreakpoint's int3.
func (tg *Target) Patch(space int, addr uint64, code, orig []byte) error {
	if err := tg.journalPatch(space, addr, code, orig); err != nil {
		return err
	}
	if err := tg.WriteMem(space, addr, code); err != nil {
		return errors.Join(err, tg.journalRemove(space, addr))
	}
	return nil
}

// Unpatch writes the original bytes back over a jump, then journals it.
func (tg *Target) Unpatch(space int, addr uint64, orig []byte) error {
	if err := tg.WriteMem(space, addr, orig); err != nil {
		return err
	}
	return tg.journalRemove(space, addr)
}

// JournalHeld journals a pad area's held byte: set (1) while gprobes
// holds a signal for a thread inside a pad, it is put back to 0 by a
// recovery (journal_linux.go) if gprobes dies meanwhile.
func (tg *Target) JournalHeld(space int, addr uint64) error {
	return tg.journalPatch(space, addr, []byte{1}, []byte{0})
}

// TrapPC: an int3 stops the thread after itself.
func (tg *Target) TrapPC(tid int, rip uint64) uint64 { return rip - 1 }

func (o processOS) Kernel() bool { return false }

func (o processOS) Check(m *rpn.Module) string {
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
// directory. Symbols and the load bias come from the file as it is mapped
// (mappedFile), never from whatever the path names now.
func (o processOS) Resolve(space int, name string, modtype rpn.ModType) (*engine.Loaded, bool, error) {
	maps, err := Maps(space)
	if err != nil {
		return nil, false, err
	}
	path, ok, err := findModule(name, maps)
	if err != nil {
		return nil, false, err
	}
	if !ok {
		return nil, false, nil
	}
	mf, err := mappedFile(space, path, maps)
	if err != nil {
		return nil, false, err
	}
	bias, err := loadBias(mf.open, path, maps)
	if err != nil {
		return nil, false, err
	}
	ld := &engine.Loaded{Key: displayPath(path), Ident: mf.id, Bias: bias}
	if set, err := openSymbols(mf); err == nil {
		ld.Symbols = set
		ld.BuildID = set.BuildID()
	}
	ld.Entries = func() (*entries.Set, error) { return fileEntries(mf) }
	ld.USDT = func(provider, name string) ([]usdt.Site, []string, error) {
		// the notes of the file as mapped (mf.open), named by its path
		sites, all, err := usdt.Sites(mf.open, provider, name)
		if err != nil && mf.open != path {
			err = fmt.Errorf("%s: %w", displayPath(path), err)
		}
		return sites, all, err
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

// deletedSuffix is what /proc/PID/maps appends to the path of a mapped
// file that was deleted or replaced since (a program rebuilt while it runs).
const deletedSuffix = " (deleted)"

func displayPath(path string) string { return strings.TrimSuffix(path, deletedSuffix) }

// mapped is a file as a process maps it: where to open it, and what
// identifies its content.
type mapped struct {
	open string // the path itself, or /proc/PID/map_files/... when the path names another file now
	id   string // device, inode, size and modification time of the content
}

// mappedFile finds the file a process maps at path. The path is used when
// it still names that file (same device and inode as the mapping);
// otherwise (the file was rebuilt, replaced or deleted since the process
// mapped it) the mapping itself is opened through /proc/PID/map_files.
// Reading the path regardless gave a rebuilt program the old program's
// offsets: an int3 in the middle of an instruction.
func mappedFile(pid int, path string, maps []Mapping) (mapped, error) {
	var m *Mapping
	for i := range maps {
		if maps[i].Path == path {
			m = &maps[i]
			break
		}
	}
	if m == nil {
		return mapped{}, fmt.Errorf("%s is not mapped in process %d", displayPath(path), pid)
	}
	if id, ok := fileID(displayPath(path), m); ok {
		return mapped{open: displayPath(path), id: id}, nil
	}
	byMap := fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.Start, m.End)
	id, ok := fileID(byMap, m)
	if !ok {
		return mapped{}, fmt.Errorf("%s: the file process %d maps (inode %d on %s) cannot be read: it was replaced, and %s cannot be opened",
			displayPath(path), pid, m.Inode, m.Dev, byMap)
	}
	return mapped{open: byMap, id: id}, nil
}

// fileID stats a file and, when it is the one the mapping holds (same
// device and inode), returns what identifies its content.
func fileID(path string, m *Mapping) (string, bool) {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil || st.Ino != m.Inode {
		return "", false
	}
	if dev := fmt.Sprintf("%02x:%02x", unix.Major(st.Dev), unix.Minor(st.Dev)); m.Dev != "" && dev != m.Dev {
		return "", false
	}
	return fmt.Sprintf("%d:%d:%d:%d.%09d", st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec), true
}

// findModule finds the mapped file a module's name stands for: with a
// '/', the same file (symlinks resolved); without, a file of that base
// name, else the library that short name stands for ("libc":
// libc.so.6, symbols.MatchShortName). Two mapped libraries of one short
// name (libfoo.so.1 and libfoo.so.2) are an error naming both.
func findModule(name string, maps []Mapping) (string, bool, error) {
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
	var short []string
	for _, m := range maps {
		if m.Path == "" || m.Path[0] != '/' || seen[m.Path] {
			continue
		}
		seen[m.Path] = true
		// a file replaced since it was mapped is still the module by
		// that name: its symbols come from the mapping (mappedFile)
		p := displayPath(m.Path)
		if !strings.Contains(name, "/") {
			ok, exact := symbols.MatchShortName(filepath.Base(p), name)
			if exact {
				return m.Path, true, nil
			}
			if ok {
				short = append(short, m.Path)
			}
			continue
		}
		if p == want {
			return m.Path, true, nil
		}
		if real, err := filepath.EvalSymlinks(p); err == nil && real == want {
			return m.Path, true, nil
		}
	}
	switch len(short) {
	case 0:
		return "", false, nil
	case 1:
		return short[0], true, nil
	}
	for i := range short {
		short[i] = displayPath(short[i])
	}
	return "", false, fmt.Errorf("%s stands for more than one mapped library (%s): name the one meant", name, strings.Join(short, ", "))
}

// PendingReason says what a module's pending probes wait for: the file
// to be mapped (by exec or dlopen), and where that file is on this host.
func (o processOS) PendingReason(space int, name string, unloaded bool) string {
	what := name
	if !strings.Contains(name, "/") && !strings.Contains(name, ".so") {
		what = fmt.Sprintf("%s (%s.so or %s.so.VERSION)", name, name, name)
	}
	why := fmt.Sprintf("waiting for %s to be mapped in process %d (dlopen, exec)", what, space)
	if unloaded {
		why = fmt.Sprintf("%s was unmapped from process %d (dlclose, exec): waiting for it to be mapped again", what, space)
	}
	if path, how, err := symbols.FindModuleFile(name, symbols.LDCachePath); err == nil {
		why += fmt.Sprintf("; on this host it is %s (%s)", path, how)
	} else {
		why += "; not on this host: " + err.Error()
	}
	return why
}

// loadBias is where a file is loaded minus where it was linked: the
// mapping that holds a PT_LOAD segment's file offset starts at that
// segment's address plus the bias. The ELF is read from open, the file
// as mapped (mappedFile).
func loadBias(open, path string, maps []Mapping) (uint64, error) {
	f, err := elf.Open(open)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", displayPath(path), err)
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
	return 0, fmt.Errorf("%s: no mapping matches its segments", displayPath(path))
}

// symCache holds the symbols of mapped files for the life of the program,
// keyed by what identifies a file's content (device, inode, size,
// modification time), never by path: a program rebuilt at the same path
// is another file. At most symCacheMax files; the oldest go first.
var symCache = struct {
	sync.Mutex
	m     map[string]*symbols.Set
	order []string
}{m: map[string]*symbols.Set{}}

const symCacheMax = 64

func openSymbols(mf mapped) (*symbols.Set, error) {
	symCache.Lock()
	defer symCache.Unlock()
	if s, ok := symCache.m[mf.id]; ok {
		return s, nil
	}
	t, err := symbols.Open(mf.open)
	if err != nil {
		return nil, err
	}
	s := symbols.NewSet(t)
	if len(symCache.order) >= symCacheMax {
		delete(symCache.m, symCache.order[0])
		symCache.order = symCache.order[1:]
	}
	symCache.m[mf.id] = s
	symCache.order = append(symCache.order, mf.id)
	return s, nil
}

// entryCache holds what may enter the code of mapped files
// (engine/entries), keyed as symCache: found once per file (libc: about
// 50 ms), at the first jump placed in it.
var entryCache = struct {
	sync.Mutex
	m     map[string]*entryScan
	order []string
}{m: map[string]*entryScan{}}

type entryScan struct {
	once sync.Once
	set  *entries.Set
	err  error
}

func fileEntries(mf mapped) (*entries.Set, error) {
	entryCache.Lock()
	sc := entryCache.m[mf.id]
	if sc == nil {
		sc = &entryScan{}
		if len(entryCache.order) >= symCacheMax {
			delete(entryCache.m, entryCache.order[0])
			entryCache.order = entryCache.order[1:]
		}
		entryCache.m[mf.id] = sc
		entryCache.order = append(entryCache.order, mf.id)
	}
	entryCache.Unlock()
	sc.once.Do(func() { sc.set, sc.err = entries.Open(mf.open) })
	return sc.set, sc.err
}

// Rendezvous is the dynamic linker's _dl_debug_state, which it calls after
// every change to the list of loaded objects.
func (o processOS) Rendezvous(space int) []uint64 {
	maps, err := Maps(space)
	if err != nil {
		return nil
	}
	for _, m := range maps {
		base := filepath.Base(m.Path)
		if !strings.HasPrefix(base, "ld-linux") && !strings.HasPrefix(base, "ld64") && !strings.HasPrefix(base, "ld-") {
			continue
		}
		mf, err := mappedFile(space, m.Path, maps)
		if err != nil {
			return nil
		}
		set, err := openSymbols(mf)
		if err != nil {
			return nil
		}
		sym, err := set.Lookup("_dl_debug_state")
		if err != nil {
			return nil
		}
		bias, err := loadBias(mf.open, m.Path, maps)
		if err != nil {
			return nil
		}
		return []uint64{sym.Addr + bias}
	}
	return nil
}

func (o processOS) Writable(space int, addr uint64) bool {
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

func (o processOS) Sys(tid int, regs *engine.Regs, v rpn.SysValue) (uint64, bool) {
	th := o.tg.t.Thread(tid)
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
func (o processOS) UserReg(tid int, regs *engine.Regs, r rpn.Reg) (uint64, bool) {
	if r >= rpn.RegCR0 {
		return 0, false
	}
	return regs[r], true
}
