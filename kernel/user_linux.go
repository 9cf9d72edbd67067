//go:build linux

package kernel

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/symbols"
)

// User code on the host target (docs/global.md): a modtype = user
// module's probes are the kernel's uprobes on the file its name names, an
// inode and an offset, so that they fire in every process that maps the
// file (running or started later, by any path, in any mount namespace),
// each running the probe's eBPF program with the process's registers and
// memory. The file is read once per placement: its build ID (checked
// against the pack's), its symbols (the locations, at their link-time
// addresses), its code (instruction boundaries and opcode = checked, as
// for a kernel probe). The poll looks at the file every second: a file
// that is another one now (rebuilt: another inode; or rewritten in place:
// another size or time) has its probes taken out, which the kernel does
// in every process, and placed again on the new file if the pack has its
// build.

// libDirs are where a module named by a bare file name (libc.so.6) is
// looked for when it is not a program in PATH.
var libDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64",
	"/usr/local/lib", "/lib", "/usr/lib",
}

// userFile finds the file a user module's name names on this host: an
// absolute path as it is (symbolic links followed), a bare name in PATH,
// then in the library directories. A relative path with a '/' is refused:
// the daemon's directory is not the user's.
func userFile(name string) (string, error) {
	var p string
	switch {
	case filepath.IsAbs(name):
		p = name
	case strings.Contains(name, "/"):
		return "", fmt.Errorf("name = %s: the host target needs the file's absolute path (or a bare name found in PATH or %s)", name, strings.Join(libDirs, ", "))
	default:
		if lp, err := exec.LookPath(name); err == nil {
			p = lp
			break
		}
		for _, d := range libDirs {
			if st, err := os.Stat(filepath.Join(d, name)); err == nil && st.Mode().IsRegular() {
				p = filepath.Join(d, name)
				break
			}
		}
		if p == "" {
			return "", fmt.Errorf("name = %s: no such program in PATH nor library in %s", name, strings.Join(libDirs, ", "))
		}
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("name = %s: %w", name, err)
	}
	st, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("name = %s: %w", name, err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("name = %s: %s is not a regular file", name, real)
	}
	return real, nil
}

// ufile is the file a user module's probes are placed on, as it was when
// they were.
type ufile struct {
	path     string
	dev, ino uint64
	size     int64
	mtime    unix.Timespec
	dyn      bool // ET_DYN: a PIE or a shared library, at another address in each process
	loads    []elf.ProgHeader
	syms     *symbols.Set // nil without symbols
	symErr   error        // why syms is nil
	build    []byte
	exe      *link.Executable
}

func statFile(path string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Stat(path, &st)
	return st, err
}

// openUfile reads what placing probes on the file at path needs.
func openUfile(path string) (*ufile, error) {
	st, err := statFile(path)
	if err != nil {
		return nil, err
	}
	f := &ufile{path: path, dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim}
	ef, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: not an ELF file gprobes can probe: %w", path, err)
	}
	defer ef.Close()
	if ef.Machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("%s: an ELF file for %s: gprobes probes x86_64 code", path, ef.Machine)
	}
	switch ef.Type {
	case elf.ET_EXEC:
	case elf.ET_DYN:
		f.dyn = true
	default:
		return nil, fmt.Errorf("%s: an ELF %s, neither a program nor a shared library", path, ef.Type)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			f.loads = append(f.loads, p.ProgHeader)
		}
	}
	if tab, err := symbols.Open(path); err == nil {
		f.syms = symbols.NewSet(tab)
		f.build = tab.BuildID()
	} else {
		f.symErr = err
	}
	if f.exe, err = link.OpenExecutable(path); err != nil {
		return nil, err
	}
	return f, nil
}

// changed says how the file at the path is not the one placed any more
// ("" when it is).
func (f *ufile) changed() string {
	st, err := statFile(f.path)
	switch {
	case err != nil:
		return fmt.Sprintf("%s is gone (%v)", f.path, err)
	case st.Dev != f.dev || st.Ino != f.ino:
		return fmt.Sprintf("%s is another file now (inode %d, was %d: rebuilt or replaced)", f.path, st.Ino, f.ino)
	case st.Size != f.size || st.Mtim != f.mtime:
		return fmt.Sprintf("%s was rewritten in place (size %d, was %d)", f.path, st.Size, f.size)
	}
	return ""
}

// fileOffset is the offset in the file of a link-time address in one of
// its loaded segments: what a uprobe is placed by.
func (f *ufile) fileOffset(vaddr uint64) (uint64, error) {
	for _, p := range f.loads {
		if vaddr >= p.Vaddr && vaddr < p.Vaddr+p.Filesz {
			if p.Flags&elf.PF_X == 0 {
				return 0, fmt.Errorf("%#x is not in %s's code (a segment without execute permission)", vaddr, f.path)
			}
			return vaddr - p.Vaddr + p.Off, nil
		}
	}
	return 0, fmt.Errorf("%#x is in no segment %s loads", vaddr, f.path)
}

// read reads the file's bytes at a link-time address.
func (f *ufile) read(vaddr uint64, b []byte) error {
	off, err := f.fileOffset(vaddr)
	if err != nil {
		return err
	}
	fd, err := os.Open(f.path)
	if err != nil {
		return err
	}
	defer fd.Close()
	n, err := fd.ReadAt(b, int64(off))
	if n == len(b) {
		return nil
	}
	return fmt.Errorf("reading %s at %#x: %v", f.path, vaddr, err)
}

// resolver resolves a user module's locations against the file's
// symbols at their link-time addresses (Bias 0: a uprobe is placed by the
// file's offset, the same in every process).
func (f *ufile) resolver() probe.Resolver {
	r := probe.Resolver{Slide: func() (uint64, error) { return 0, nil }}
	if f.syms != nil {
		r.Env = probe.Symbols{Set: f.syms}
		r.Lines = func(file string, line int) (uint64, error) {
			a, _, err := f.syms.LineAddr(file, line)
			return a, err
		}
	}
	return r
}

// biased are a probe's push d, immediates that hold an address in the
// module, when the module is a shared object or PIE: at another address
// in each process that maps it, so one program moves them by each hit's
// load bias (bpf.Options.Biased); nil for a program at its link-time
// addresses (ET_EXEC) or without such a push.
func (f *ufile) biased(m *rpn.Module, pi int) map[uint32]uint64 {
	if !f.dyn {
		return nil
	}
	var out map[uint32]uint64
	for _, rl := range m.Relocs {
		if rl.Sum.BiasFactor() == 0 || m.ProbeAt(rl.Off) != pi {
			continue
		}
		if out == nil {
			out = map[uint32]uint64{}
		}
		out[uint32(rl.Off)] = rl.Sum.BiasFactor()
	}
	return out
}

// checkUserCode checks that a link-time address is an instruction
// boundary of the function it is in (decoded from the function's first
// byte in the file) and the probe's opcode.
func (f *ufile) checkUserCode(d *rpn.Probe, addr uint64) error {
	if f.syms == nil {
		return fmt.Errorf("%#x: %s has no symbols to find the function's start, and a uprobe in the middle of an instruction would corrupt every process: not placed (%v)", addr, f.path, f.symErr)
	}
	fn, off, ok := f.syms.Nearest(addr)
	if !ok || fn.Kind != 'T' && fn.Kind != 't' && fn.Kind != 'W' && fn.Kind != 'w' {
		return fmt.Errorf("%#x is in no function of %s", addr, f.path)
	}
	if fn.Size != 0 && off >= fn.Size {
		return fmt.Errorf("%#x is past the end of %s (%d bytes) in %s", addr, fn.Name, fn.Size, f.path)
	}
	if off > 1<<20 {
		return fmt.Errorf("%s+%#x: past the function's reach", fn.Name, off)
	}
	code := make([]byte, off+16)
	if err := f.read(fn.Addr, code); err != nil {
		// the last instruction of the segment: what is there
		code = code[:off+1]
		if err := f.read(fn.Addr, code); err != nil {
			return err
		}
	}
	if err := onBoundary(fn.Name, off, code); err != nil {
		return err
	}
	if d.HasOpcode && code[off] != d.Opcode {
		return &mismatch{fmt.Sprintf("the byte at %s+%#x in %s is %#02x, not the opcode %#02x", fn.Name, off, f.path, code[off], d.Opcode)}
	}
	return nil
}

// attachUser places a user probe: a uprobe at its offset, a uretprobe
// for a retprobe.
func (t *Target) attachUser(p *bprobe, o bpf.Options) error {
	d := p.def()
	f := p.s.mod.file
	switch d.Kind {
	case rpn.ProbeOffset, rpn.ProbeRetprobe:
	case rpn.ProbeUSDT:
		return t.attachUSDT(p, o)
	default:
		return fmt.Errorf("probe kind %s: the host target places offset, retprobe and usdt probes in user code", d.Kind)
	}
	addr, err := f.resolver().Location(d)
	if err != nil {
		return err
	}
	p.Addr = addr
	foff, err := f.fileOffset(addr)
	if err != nil {
		return err
	}
	if d.Kind == rpn.ProbeRetprobe {
		if f.syms == nil {
			return fmt.Errorf("retprobe = %s: %s has no symbols to tell a function's first instruction (%v)", d.Loc.Text, f.path, f.symErr)
		}
		if fn, off, ok := f.syms.Nearest(addr); !ok || off != 0 {
			return fmt.Errorf("retprobe = %s: %#x is %s+%#x, not a function's first instruction", d.Loc.Text, addr, fn.Name, off)
		}
		if err := t.mech.Uretprobe; err != nil {
			return fmt.Errorf("retprobe: %v", err)
		}
		if b := f.biased(p.s.src, p.Index); len(b) > 0 {
			return fmt.Errorf("push d of an address in %s, a shared object (or PIE) at another address in each process: a return probe does not see where the process loaded it (its rip is the caller's), so it cannot move the address; an entry probe can (docs/global.md)", f.path)
		}
		o.Kind = bpf.KindKretprobe
		prog, err := t.load(p.s, p, o)
		if err != nil {
			return err
		}
		l, err := f.exe.Uretprobe("", prog, &link.UprobeOptions{Address: foff})
		if err != nil {
			prog.Close()
			return fmt.Errorf("uretprobe %s at file offset %#x: %w", f.path, foff, err)
		}
		p.prog, p.link, p.How = prog, l, "uretprobe"
		p.atts = []attachment{{foff: foff, ret: true, prog: prog}}
		return nil
	}
	if err := f.checkUserCode(d, addr); err != nil {
		var mm *mismatch
		if errors.As(err, &mm) {
			p.State = probe.StateMismatch
		}
		return err
	}
	if err := t.mech.Uprobe; err != nil {
		return fmt.Errorf("uprobe: %v", err)
	}
	o.Kind = bpf.KindUprobe
	o.Addr = addr
	o.Biased = f.biased(p.s.src, p.Index)
	prog, err := t.load(p.s, p, o)
	if err != nil {
		return err
	}
	l, err := f.exe.Uprobe("", prog, &link.UprobeOptions{Address: foff})
	if err != nil {
		prog.Close()
		return fmt.Errorf("uprobe %s at file offset %#x: %w", f.path, foff, err)
	}
	p.prog, p.link, p.How = prog, l, "uprobe"
	p.atts = []attachment{{foff: foff, prog: prog}}
	return nil
}

// filesChanged takes out the probes of user modules whose file is
// another now, and places them again on the file there is now (its
// build checked again); the target's lock held.
func (t *Target) filesChanged() {
	for _, m := range t.kmodules() {
		if m.user == "" {
			continue
		}
		if m.file == nil {
			// it could not be opened at the last placement: tried
			// again when the path shows another file than then
			st, err := statFile(m.user)
			seen := fmt.Sprint(st.Dev, st.Ino, st.Size, st.Mtim, err)
			if seen == m.tried {
				continue
			}
			m.tried = seen
			for _, s := range m.sources() {
				if s.prog == nil {
					t.place(s)
				}
			}
			continue
		}
		why := m.file.changed()
		if why == "" {
			continue
		}
		t.warn(fmt.Sprintf("module %s: %s: its probes are taken out of every process, and placed again on the file there is now if the pack has its build", m.Name, why))
		for _, s := range m.sources() {
			if s.prog != nil {
				t.unplace(s)
			}
		}
		m.file = nil
		for _, s := range m.sources() {
			t.place(s)
		}
	}
}

// UprobeLinks counts the eBPF links in the kernel, of any process,
// whose uprobe or uretprobe is on the file at path (as the kernel
// recorded its path when the link was made): what a test of "nothing
// left behind" asks the kernel.
func UprobeLinks(path string) (int, error) {
	n := 0
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err != nil {
			continue
		}
		if pe := info.PerfEvent(); pe != nil {
			if u := pe.Uprobe(); u != nil && u.File == path {
				n++
			}
		}
	}
	return n, it.Err()
}
