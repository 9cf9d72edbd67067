// Package linuxkernel is what gprobes knows of a Linux guest kernel seen
// from outside, whatever reads its memory (a GDB stub, Xen from dom0): the
// symbols and types given with --symbols, the KASLR slide of the running
// kernel, the current task of a vCPU and its user-mode registers. The
// guest targets (gdbtarget, xen) share it.
package linuxkernel

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/symbols"
)

// Memory reads the guest kernel's virtual memory.
type Memory interface {
	ReadMem(addr uint64, p []byte) error
}

// MemoryWriter is a Memory that can also write guest memory: pop u writes
// the task's saved user-mode registers through it.
type MemoryWriter interface {
	WriteMem(addr uint64, p []byte) error
}

// Options are what the user says about the kernel.
type Options struct {
	// Symbols for the guest kernel: System.map, a kallsyms copy, a
	// vmlinux (ELF with DWARF or only .BTF), a raw BTF file.
	Symbols []string
	// KASLROffset, when set, is the slide of the kernel text; otherwise it
	// is found by looking for linux_banner ("Linux version ") in the
	// running guest.
	KASLROffset *int64
}

// Kernel is one running guest kernel.
type Kernel struct {
	mem     Memory
	opts    Options
	syms    *symbols.Set
	slide   uint64
	slideOK bool
	kinfo   *kernelInfo
	// kernel modules (module.go): struct module's layout, the symbols
	// read per loaded module, and whether one was asked for
	mods        *modLayout
	modsErr     error
	modCache    map[modKey]*engine.Loaded
	wantModules bool
	// the image's ORC tables (stack.go), loaded at the first kernel
	// stack or insert that needs one; orcWhy says why there are none
	orc     *orcTable
	orcWhy  string
	orcDone bool
	modORC  map[modText]*orcTable // modules' ORC, read from guest memory per load
	// what was read from guest memory (fromguest.go): where the symbols
	// and types came from, why none, the cache entry used or made
	symsFrom, typesFrom string
	guestErr            error
	cached              string
	descMu              sync.Mutex
	desc                string // Describe's answer
}

// New loads the symbols of opts and finds the slide in mem. When opts
// give no symbol with an address, the symbols (and, failing a file with
// types, the BTF) are read from the guest's memory (fromguest.go).
func New(mem Memory, opts Options) (*Kernel, error) {
	k := &Kernel{mem: mem, opts: opts}
	k.opts.Symbols = nil // AddSymbols keeps the ones loaded
	if len(opts.Symbols) > 0 {
		if err := k.AddSymbols(opts.Symbols); err != nil {
			return nil, err
		}
	}
	if !k.hasAddresses() && opts.KASLROffset == nil {
		k.fromGuest()
	}
	k.describe()
	return k, nil
}

// AddSymbols loads more symbol files for the kernel (repeated inserts may
// bring their own) and finds the slide if it is not known yet.
func (k *Kernel) AddSymbols(paths []string) error {
	if k.syms == nil {
		k.syms = symbols.NewSet()
	}
	for _, p := range paths {
		tab, err := symbols.Open(p)
		if err != nil {
			return err
		}
		k.syms.Add(tab)
		k.opts.Symbols = append(k.opts.Symbols, p)
	}
	if !k.slideOK {
		if err := k.findSlide(); err != nil {
			return err
		}
	}
	k.afterSymbols()
	k.describe()
	return nil
}

// afterSymbols makes what depends on the symbols again.
func (k *Kernel) afterSymbols() {
	k.kinfo = newKernelInfo(k.mem, k.syms)
	k.mods, k.modsErr, k.modCache = nil, nil, nil
	k.orc, k.orcWhy, k.orcDone, k.modORC = nil, "", false, nil
}

// findSlide finds the KASLR slide of the kernel text: --kaslr-offset, or
// the candidate (a multiple of 2 MiB below 1 GiB) at which linux_banner
// reads "Linux version ".
func (k *Kernel) findSlide() error {
	if k.opts.KASLROffset != nil {
		k.slide, k.slideOK = uint64(*k.opts.KASLROffset), true
		return nil
	}
	sym, err := k.syms.Lookup("linux_banner")
	if err != nil {
		return nil // no symbols with addresses yet: a later insert may bring them
	}
	want := []byte("Linux version ")
	got := make([]byte, len(want))
	var first string // what is at the unslid address, for the message
	for slide := uint64(0); slide < 1<<30; slide += 2 << 20 {
		err := k.mem.ReadMem(sym.Addr+slide, got)
		if err == nil && string(got) == string(want) {
			k.slide, k.slideOK = slide, true
			return nil
		}
		if slide == 0 {
			if err != nil {
				first = "reading it: " + err.Error()
			} else {
				first = fmt.Sprintf("it reads %q", got)
			}
		}
	}
	return fmt.Errorf("cannot find the kernel's KASLR slide: no \"Linux version\" at linux_banner (%#x; %s) plus any multiple of 2 MiB below 1 GiB: are the symbols of this kernel? Give the slide with --kaslr-offset", sym.Addr, first)
}

// Slide is the KASLR slide found (0 without KASLR).
func (k *Kernel) Slide() (uint64, bool) { return k.slide, k.slideOK }

// Symbols are the kernel's symbols and types (nil before any were given).
func (k *Kernel) Symbols() *symbols.Set { return k.syms }

// Check says why a module cannot be probed in this kernel, or "": what
// every guest target refuses alike (target names the kind for messages;
// noIO says why the guest's port IO is out of reach, "" when the target
// reaches it).
func (k *Kernel) Check(m *rpn.Module, target, noIO string) string {
	if m.ModType != rpn.ModKernel {
		return fmt.Sprintf("modtype = user: a %s target is a guest kernel; probe processes with pid: or exec:", target)
	}
	if m.Arch != rpn.ArchX86_64 {
		return "arch = i386: gprobes probes x86_64 guest kernels"
	}
	if where, ok := engine.Uses(m, rpn.OpPushTask, rpn.OpPushPID, rpn.OpPushTID, rpn.OpPushU); ok {
		if msg := k.kinfo.missing(); msg != "" {
			return fmt.Sprintf("%s needs the current task: %s", where, msg)
		}
	}
	if where, ok := engine.UsesIO(m); ok && noIO != "" {
		return fmt.Sprintf("port IO (%s): %s", where, noIO)
	}
	return ""
}

// Resolve: the kernel image ("vmlinux", "kernel") is always loaded; its
// addresses are the symbols' plus the KASLR slide. Any other name is a
// kernel module, loaded while the guest's module list has it (module.go).
func (k *Kernel) Resolve(name string) (*engine.Loaded, bool, error) {
	switch name {
	case "vmlinux", "kernel", "bzImage", "vmlinuz":
	default:
		if len(k.opts.Symbols) > 0 && !k.slideOK {
			return nil, false, errors.New("the kernel's KASLR slide is unknown: give System.map or a kallsyms copy with --symbols, or --kaslr-offset")
		}
		return k.resolveModule(name)
	}
	if k.syms == nil && k.guestErr != nil {
		return nil, false, k.errNoGuestSymbols()
	}
	ld := &engine.Loaded{Key: "vmlinux", Bias: k.slide, Symbols: k.syms}
	if k.syms != nil {
		// the build the guest runs, not the one of the files given
		ld.BuildID = k.GuestBuildID()
		if ld.BuildID == nil {
			ld.BuildID = k.syms.BuildID()
		}
		if lo, err := k.syms.Lookup("_stext"); err == nil {
			if hi, err := k.syms.Lookup("_etext"); err == nil {
				start, end := lo.Addr+k.slide, hi.Addr+k.slide
				ld.Exec = func(a uint64) bool { return a >= start && a < end }
			}
		}
	}
	if len(k.opts.Symbols) > 0 && !k.slideOK {
		return nil, false, errors.New("the kernel's KASLR slide is unknown: give System.map or a kallsyms copy with --symbols, or --kaslr-offset")
	}
	return ld, true, nil
}

// maxNotes bounds the kernel's .notes read from guest memory (a few
// hundred bytes in every kernel seen; the symbols could say anything).
const maxNotes = 4096

// GuestBuildID reads the build ID of the kernel the guest runs from guest
// memory: the GNU build-ID note among the kernel's notes, between
// __start_notes and __stop_notes (System.map, kallsyms or the vmlinux
// give them) moved by the KASLR slide. nil when the symbols do not have
// them, the slide is unknown, or the memory holds no build ID.
func (k *Kernel) GuestBuildID() []byte {
	if k.syms == nil || !k.slideOK {
		return nil
	}
	start, err := k.syms.Lookup("__start_notes")
	if err != nil {
		return nil
	}
	stop, err := k.syms.Lookup("__stop_notes")
	if err != nil || stop.Addr <= start.Addr || stop.Addr-start.Addr > maxNotes {
		return nil
	}
	b := make([]byte, stop.Addr-start.Addr)
	if err := k.mem.ReadMem(start.Addr+k.slide, b); err != nil {
		return nil
	}
	return symbols.NotesBuildID(b)
}

// Sys answers push task, pid and tid for a vCPU at a hit (procid is the
// target's: the vCPU's index).
func (k *Kernel) Sys(regs *engine.Regs, v rpn.SysValue) (uint64, bool) {
	switch v {
	case rpn.SysTask:
		return k.kinfo.current(regs)
	case rpn.SysPID:
		return k.kinfo.taskField(regs, "tgid")
	case rpn.SysTID:
		return k.kinfo.taskField(regs, "pid")
	}
	return 0, false
}

// UserReg reads a user-mode register of the current task (push u).
func (k *Kernel) UserReg(regs *engine.Regs, r rpn.Reg) (uint64, bool) {
	return k.kinfo.userReg(regs, r)
}

// SetUserReg writes a user-mode register of the current task (pop u), when
// the kernel's memory can be written and the task entered the kernel from
// user mode.
func (k *Kernel) SetUserReg(regs *engine.Regs, r rpn.Reg, v uint64) bool {
	w, _ := k.mem.(MemoryWriter)
	return k.kinfo.setUserReg(w, regs, r, v)
}

// PendingReason says why a kernel module's probes wait (query's reason).
func (k *Kernel) PendingReason(name string, unloaded bool) string {
	name = ModuleName(name)
	if unloaded {
		return probe.ReasonUnloaded(name)
	}
	return probe.ReasonNotLoaded(name)
}
