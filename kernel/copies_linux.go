//go:build linux

package kernel

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"strconv"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/gprobes/gprobes/internal/procmaps"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/symbols"
)

// Every copy of a build (docs/global.md, "Every copy of the build"): a
// pack is bound to a build, and a container carries its own copy of a
// library (another file, another inode), which a uprobe on the file the
// module's name names does not reach. Inserted with InsertPackCopies
// (`gprobes insert --every-copy`), a module's probes go on every file
// with the placed build's ID that a process maps: found at insert and,
// as processes map them, at each poll, by the files' build IDs read
// through /proc/PID/map_files (which reaches a file in another mount
// namespace). Each copy gets the probes' own programs, at the same file
// offsets (the same build: the same code), as more links.

// attachment is how one probe's program went on its file: what a copy
// repeats.
type attachment struct {
	foff   uint64
	refCtr uint64
	ret    bool
	prog   *ebpf.Program
}

// copyFile is an executable file some process maps, as the poll saw it.
type copyFile struct {
	dev, ino uint64
	build    []byte
}

// InsertPackCopies is InsertPack, the module's probes also on every copy
// of the placed build that processes map (user modules of the host
// target only).
func (t *Target) InsertPackCopies(builds []*rpn.Module, mode probe.InsertMode) ([]probe.Info, error) {
	m := builds[0]
	if !t.opts.User || m.ModType != rpn.ModUser {
		return nil, fmt.Errorf("insert %s: every copy of a build: only the host target's user modules (modtype = user) are placed on copies", m.Name)
	}
	if err := probe.LoadPack(builds); err != nil {
		return nil, err
	}
	for _, b := range builds {
		if len(b.BuildID) == 0 {
			return nil, fmt.Errorf("insert %s: every copy of a build: the pack is bound to no build (built without the file's symbols): nothing tells its copies", m.Name)
		}
	}
	t.mu.Lock()
	t.everyCopy = true
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.everyCopy = false
		t.mu.Unlock()
	}()
	infos, err := t.InsertPack(builds, mode)
	if err != nil {
		return infos, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var km *kmodule
	for _, k := range t.kmodules() {
		if k.Name == m.Name {
			// a module merged into is for every copy from now on too
			k.copies, km = true, k
		}
	}
	t.scanCopies()
	if km != nil && len(km.Sources) > 0 {
		return t.book.Infos(km.Sources[len(km.Sources)-1]), nil
	}
	return infos, nil
}

var _ probe.CopyInserter = (*Target)(nil)

// scanCopies finds the files processes map with the build of a module
// inserted for every copy, and places the module's probes there too; the
// target's lock held.
func (t *Target) scanCopies() {
	var mods []*kmodule
	for _, m := range t.kmodules() {
		if m.copies && m.file != nil {
			mods = append(mods, m)
		}
	}
	if len(mods) == 0 {
		return
	}
	if t.copyCache == nil {
		t.copyCache = map[string]*copyFile{}
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		maps, err := procmaps.Read(pid)
		if err != nil {
			continue // gone meanwhile, or not ours to read
		}
		for _, mp := range maps {
			if !mp.Exec() || mp.Inode == 0 || len(mp.Path) == 0 || mp.Path[0] != '/' {
				continue
			}
			key := fmt.Sprintf("%s:%d", mp.Dev, mp.Inode)
			path := fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, mp.Start, mp.End)
			cf, ok := t.copyCache[key]
			if !ok {
				cf = readCopy(path)
				t.copyCache[key] = cf
			}
			if cf == nil || len(cf.build) == 0 {
				continue
			}
			for _, m := range mods {
				if cf.dev == m.file.dev && cf.ino == m.file.ino {
					continue
				}
				t.placeCopy(m, cf, path)
			}
		}
	}
}

// readCopy reads a mapped file's device, inode and build ID (nil when it
// cannot be read).
func readCopy(path string) *copyFile {
	st, err := statFile(path)
	if err != nil {
		return nil
	}
	cf := &copyFile{dev: st.Dev, ino: st.Ino}
	ef, err := elf.Open(path)
	if err != nil {
		return cf
	}
	defer ef.Close()
	if s := ef.Section(".note.gnu.build-id"); s != nil {
		if b, err := s.Data(); err == nil {
			cf.build = symbols.NotesBuildID(b)
		}
	}
	return cf
}

// placeCopy places the probes of m's sources whose build is cf's on the
// copy (reached by path) where they are not yet.
func (t *Target) placeCopy(m *kmodule, cf *copyFile, path string) {
	key := [2]uint64{cf.dev, cf.ino}
	var ex *link.Executable
	for _, s := range m.sources() {
		if s.prog == nil || !bytes.Equal(s.src.BuildID, cf.build) {
			continue
		}
		for _, p := range s.probes() {
			if p.link == nil || p.copies[key] || len(p.atts) == 0 {
				continue
			}
			if ex == nil {
				var err error
				if ex, err = link.OpenExecutable(path); err != nil {
					t.warn(fmt.Sprintf("module %s: a copy of its build at %s: %v", m.Name, path, err))
					return
				}
			}
			var placed []siteLink
			var err error
			for _, a := range p.atts {
				var l link.Link
				uo := &link.UprobeOptions{Address: a.foff, RefCtrOffset: a.refCtr}
				if a.ret {
					l, err = ex.Uretprobe("", a.prog, uo)
				} else {
					l, err = ex.Uprobe("", a.prog, uo)
				}
				if err != nil {
					break
				}
				placed = append(placed, siteLink{link: l})
			}
			if err != nil {
				for _, sl := range placed {
					sl.link.Close()
				}
				t.warn(fmt.Sprintf("module %s, probe %s: a copy of its build at %s (inode %d): %v", m.Name, p.Def().Loc.Text, path, cf.ino, err))
				continue
			}
			p.extra = append(p.extra, placed...)
			if p.copies == nil {
				p.copies = map[[2]uint64]bool{}
			}
			p.copies[key] = true
		}
	}
}
