package linuxkernel

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gprobes/gprobes/symbols"
)

// Symbols and types from the guest's own memory, when --symbols gives no
// symbol with an address: the kallsyms tables (kallsyms.go) and the BTF
// between __start_BTF and __stop_BTF, kept in a cache by the kernel's
// build ID so that the next attach to a guest running the same build reads
// only its notes (docs/guest.md, "Symbols and types from guest memory").

// maxBTF bounds the BTF read from guest memory (4.3 MB in Debian 6.1's).
const maxBTF = 64 << 20

// cacheMeta is what a cache entry says beside its files: where the notes
// are from _text, to check a running guest's build ID with no symbols.
type cacheMeta struct {
	NotesOff uint64 `json:"notes_off"`
	NotesLen uint64 `json:"notes_len"`
	Syms     int    `json:"symbols"`
	BTF      bool   `json:"btf"`
}

// CacheDir is where the symbols and types read from guests are kept:
// $GPROBES_KERNEL_CACHE, else gprobes/kernels in the user's cache folder
// ($XDG_CACHE_HOME or ~/.cache). "" when there is none.
func CacheDir() string {
	if d := os.Getenv("GPROBES_KERNEL_CACHE"); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "gprobes", "kernels")
}

// hasAddresses reports whether the symbols loaded give addresses (a
// System.map, a kallsyms copy, a vmlinux with a symbol table): then the
// guest's memory is not read for them.
func (k *Kernel) hasAddresses() bool {
	if k.syms == nil {
		return false
	}
	for _, t := range k.syms.Tables() {
		if t.Len() > 0 && !t.Relocatable() {
			return true
		}
	}
	return false
}

// hasTypes reports whether a table loaded has types (DWARF or BTF of the
// kernel, not a module's).
func (k *Kernel) hasTypes() bool {
	if k.syms == nil {
		return false
	}
	for _, t := range k.syms.Tables() {
		if !t.Relocatable() && (t.HasDWARF() || t.HasBTF()) {
			return true
		}
	}
	return false
}

// fromGuest reads the kernel's symbols (and its BTF, when no file gave
// types) from guest memory, or from the cache when the guest runs a build
// read before. A failure is kept in k.guestErr for the messages that need
// symbols; the kernel stays usable by address.
func (k *Kernel) fromGuest() {
	text, err := FindText(k.mem)
	if err != nil {
		k.guestErr = err
		return
	}
	k.slide, k.slideOK = text-defaultText, true
	if k.fromCache(text) {
		k.afterSymbols()
		return
	}
	ks, err := ReadKallsyms(k.mem, text)
	if err != nil {
		k.slideOK = false
		k.guestErr = err
		return
	}
	k.slide = ks.Text - defaultText
	syms := ks.Syms
	for i := range syms {
		if syms[i].Addr >= kernelMap {
			syms[i].Addr -= k.slide
		}
	}
	tab, err := symbols.NewKallsyms("guest memory (kallsyms)", syms)
	if err != nil {
		k.slideOK = false
		k.guestErr = err
		return
	}
	if k.syms == nil {
		k.syms = symbols.NewSet()
	}
	k.syms.Add(tab)
	k.symsFrom = fmt.Sprintf("kallsyms in guest memory (%d symbols; token table at %#x, %s)", len(syms), ks.Tokens, ks.Layout)
	var raw []byte
	if !k.hasTypes() {
		raw = k.guestBTF()
	}
	k.saveCache(text, syms, raw)
	k.afterSymbols()
}

// guestBTF reads the kernel's BTF from guest memory and adds it to the
// symbols; it returns the blob, or nil with k.typesFrom saying why not.
func (k *Kernel) guestBTF() []byte {
	start, err1 := k.syms.Lookup("__start_BTF")
	stop, err2 := k.syms.Lookup("__stop_BTF")
	if err1 != nil || err2 != nil || stop.Addr <= start.Addr || stop.Addr-start.Addr > maxBTF {
		k.typesFrom = "none: the guest kernel has no BTF (no __start_BTF and __stop_BTF among its symbols: built without CONFIG_DEBUG_INFO_BTF); give its vmlinux (with DWARF or .BTF) with --symbols"
		return nil
	}
	raw := make([]byte, stop.Addr-start.Addr)
	if err := k.mem.ReadMem(start.Addr+k.slide, raw); err != nil {
		k.typesFrom = fmt.Sprintf("none: reading the guest's BTF (%#x, %d bytes): %v; give its vmlinux with --symbols", start.Addr+k.slide, len(raw), err)
		return nil
	}
	tab, err := symbols.NewBTF("guest memory (BTF)", raw)
	if err != nil {
		k.typesFrom = fmt.Sprintf("none: the guest's BTF: %v; give its vmlinux with --symbols", err)
		return nil
	}
	k.syms.Add(tab)
	k.typesFrom = fmt.Sprintf("BTF in guest memory (%d bytes at %#x)", len(raw), start.Addr+k.slide)
	return raw
}

// saveCache keeps what was read under the guest's build ID; a kernel
// without one, or no cache folder, is read again at the next attach.
func (k *Kernel) saveCache(text uint64, syms []symbols.Symbol, btf []byte) {
	dir := CacheDir()
	id := k.GuestBuildID()
	if dir == "" || id == nil {
		return
	}
	start, err1 := k.syms.Lookup("__start_notes")
	stop, err2 := k.syms.Lookup("__stop_notes")
	if err1 != nil || err2 != nil {
		return
	}
	meta := cacheMeta{NotesOff: start.Addr + k.slide - text, NotesLen: stop.Addr - start.Addr, Syms: len(syms), BTF: btf != nil}
	final := filepath.Join(dir, hex.EncodeToString(id))
	tmp, err := os.MkdirTemp(dir, ".new-")
	if err != nil {
		if os.MkdirAll(dir, 0o755) != nil {
			return
		}
		if tmp, err = os.MkdirTemp(dir, ".new-"); err != nil {
			return
		}
	}
	var b strings.Builder
	for _, s := range syms {
		fmt.Fprintf(&b, "%016x %c %s\n", s.Addr, s.Kind, s.Name)
	}
	mj, _ := json.Marshal(meta)
	ok := os.WriteFile(filepath.Join(tmp, "kallsyms"), []byte(b.String()), 0o644) == nil &&
		os.WriteFile(filepath.Join(tmp, "meta.json"), mj, 0o644) == nil
	if ok && btf != nil {
		// named vmlinux: a module's split BTF finds its base by that name
		ok = os.WriteFile(filepath.Join(tmp, "vmlinux"), btf, 0o644) == nil
	}
	if !ok || os.Rename(tmp, final) != nil {
		_ = os.RemoveAll(tmp) // another attach saved the same build first, or the disk is full: read again next time
		return
	}
	k.cached = final
}

// fromCache loads a cache entry whose build ID the guest's notes (at the
// entry's offset from text) carry.
func (k *Kernel) fromCache(text uint64) bool {
	dir := CacheDir()
	if dir == "" {
		return false
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		id, err := hex.DecodeString(e.Name())
		if err != nil {
			continue
		}
		d := filepath.Join(dir, e.Name())
		mj, err := os.ReadFile(filepath.Join(d, "meta.json"))
		var meta cacheMeta
		if err != nil || json.Unmarshal(mj, &meta) != nil || meta.NotesLen == 0 || meta.NotesLen > maxNotes {
			continue
		}
		notes := make([]byte, meta.NotesLen)
		if k.mem.ReadMem(text+meta.NotesOff, notes) != nil || string(symbols.NotesBuildID(notes)) != string(id) {
			continue
		}
		tab, err := symbols.Open(filepath.Join(d, "kallsyms"))
		if err != nil {
			continue
		}
		if k.syms == nil {
			k.syms = symbols.NewSet()
		}
		k.syms.Add(tab)
		k.symsFrom = fmt.Sprintf("kallsyms read from guest memory before, cached by build ID in %s (%d symbols)", d, tab.Len())
		if !k.hasTypes() {
			if meta.BTF {
				if bt, err := symbols.Open(filepath.Join(d, "vmlinux")); err == nil {
					k.syms.Add(bt)
					k.typesFrom = "BTF read from guest memory before, cached by build ID in " + d
				}
			}
			if k.typesFrom == "" {
				k.guestBTF() // not kept before: read it now (not cached again)
			}
		}
		k.cached = d
		return true
	}
	return false
}

// errNoGuestSymbols is the error of a use of symbols the guest did not
// give, naming the files that would.
func (k *Kernel) errNoGuestSymbols() error {
	return fmt.Errorf("no symbols for the guest kernel: none given with --symbols, and none found in its memory (%v): give its System.map, a copy of its /proc/kallsyms or its vmlinux with --symbols", k.guestErr)
}

// Sources say where the kernel's symbols and types came from, for status
// and the insert's report.
func (k *Kernel) Sources() (syms, types string) {
	syms, types = k.symsFrom, k.typesFrom
	if syms == "" {
		switch {
		case k.guestErr != nil:
			syms = k.errNoGuestSymbols().Error()
		case len(k.opts.Symbols) > 0:
			syms = "--symbols " + strings.Join(k.opts.Symbols, ", ")
		default:
			syms = "none"
		}
	}
	if types == "" {
		switch {
		case k.hasTypes() && len(k.opts.Symbols) > 0:
			types = "--symbols " + strings.Join(k.opts.Symbols, ", ")
		default:
			types = "none: give the guest's vmlinux (with DWARF or .BTF) with --symbols"
		}
	}
	return syms, types
}

// Describe says what the guest kernel is: its version (linux_banner), build
// ID and slide, and where its symbols and types came from. It is made when
// the symbols change and read from any goroutine.
func (k *Kernel) Describe() string {
	k.descMu.Lock()
	defer k.descMu.Unlock()
	return k.desc
}

// describe makes what Describe says, reading the banner from guest memory.
func (k *Kernel) describe() {
	var parts []string
	if k.syms != nil && k.slideOK {
		if s, err := k.syms.Lookup("linux_banner"); err == nil {
			b := make([]byte, 128)
			if k.mem.ReadMem(s.Addr+k.slide, b) == nil {
				v := string(b)
				if i := strings.IndexAny(v, "\x00\n"); i >= 0 {
					v = v[:i]
				}
				if i := strings.Index(v, " ("); i >= 0 {
					v = v[:i]
				}
				parts = append(parts, strings.TrimSpace(v))
			}
		}
		if id := k.GuestBuildID(); id != nil {
			parts = append(parts, "build ID "+hex.EncodeToString(id))
		}
		parts = append(parts, fmt.Sprintf("KASLR slide %#x", k.slide))
	}
	syms, types := k.Sources()
	parts = append(parts, "symbols: "+syms, "types: "+types)
	k.descMu.Lock()
	k.desc = strings.Join(parts, "; ")
	k.descMu.Unlock()
}
