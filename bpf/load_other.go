//go:build !linux

package bpf

import (
	"runtime"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/gprobes/gprobes/rpn"
)

// On systems other than Linux the compiler works (Compile, CompileProbe:
// a program can be checked anywhere) and everything that needs the
// running kernel fails with ErrNotSupported.

// Available returns ErrNotSupported.
func Available() error { return ErrNotSupported }

// NewMaps returns ErrNotSupported.
func NewMaps(m *rpn.Module, o MapOptions) (*Maps, error) { return nil, ErrNotSupported }

// NewGV returns ErrNotSupported.
func NewGV() (*ebpf.Map, error) { return nil, ErrNotSupported }

// SetClock returns ErrNotSupported.
func (m *Maps) SetClock() error { return ErrNotSupported }

// ProbeCounters returns ErrNotSupported.
func (m *Maps) ProbeCounters(pi int) (Counters, error) { return Counters{}, ErrNotSupported }

// Vars returns ErrNotSupported.
func (m *Maps) Vars(gv bool) ([]uint64, error) { return nil, ErrNotSupported }

// SetVars returns ErrNotSupported.
func (m *Maps) SetVars(gv bool, v []uint64) error { return ErrNotSupported }

// Close does nothing.
func (m *Maps) Close() error { return nil }

// Load returns ErrNotSupported.
func (c *Compiled) Load() (*ebpf.Program, error) { return nil, ErrNotSupported }

// AttachTracepoint returns ErrNotSupported.
func AttachTracepoint(prog *ebpf.Program, group, event string) (link.Link, error) {
	return nil, ErrNotSupported
}

// AttachRawTracepoint returns ErrNotSupported.
func AttachRawTracepoint(prog *ebpf.Program, name string) (link.Link, error) {
	return nil, ErrNotSupported
}

// EnsureTracefs returns ErrNotSupported.
func EnsureTracefs() error { return ErrNotSupported }

// Reader reads the records of a ring buffer (Linux only).
type Reader struct{}

// NewReader returns ErrNotSupported.
func NewReader(m *Maps) (*Reader, error) { return nil, ErrNotSupported }

// Read returns ErrNotSupported.
func (r *Reader) Read() (Record, error) { return Record{}, ErrNotSupported }

// Close does nothing.
func (r *Reader) Close() error { return nil }

// Module is a module's probes loaded in the kernel (Linux only).
type Module struct {
	Maps     *Maps
	Progs    []*ebpf.Program
	Compiled []*Compiled
	Errs     []error
}

// ModuleOptions tune LoadModule.
type ModuleOptions struct {
	MapOptions
	Kind     func(pi int) Kind
	PID, TID uint32
	Wakeup   int
}

// LoadModule returns ErrNotSupported.
func LoadModule(p *rpn.Program, o ModuleOptions) (*Module, error) { return nil, ErrNotSupported }

// Counters returns ErrNotSupported.
func (m *Module) Counters(pi int) (Counters, error) { return Counters{}, ErrNotSupported }

// Close does nothing.
func (m *Module) Close() error { return nil }

// ReadFormat returns ErrNotSupported (ParseFormat works anywhere).
func ReadFormat(group, event string) (*Format, error) { return nil, ErrNotSupported }

// EventsDir: no tracefs.
func EventsDir() (string, error) { return "", ErrNotSupported }

// AttachKprobe returns ErrNotSupported.
func AttachKprobe(prog *ebpf.Program, symbol string, offset uint64) (link.Link, error) {
	return nil, ErrNotSupported
}

// AttachKretprobe returns ErrNotSupported.
func AttachKretprobe(prog *ebpf.Program, symbol string, maxactive int) (link.Link, error) {
	return nil, ErrNotSupported
}

// AttachFentry returns ErrNotSupported.
func AttachFentry(prog *ebpf.Program) (link.Link, error) { return nil, ErrNotSupported }

// RemoveStaleKprobeEvents returns ErrNotSupported.
func RemoveStaleKprobeEvents() (int, error) { return 0, ErrNotSupported }

// FuncArgs returns ErrNotSupported.
func FuncArgs(name string) (int, error) { return 0, ErrNotSupported }

// Probe reports every mechanism missing (ErrNotSupported).
func Probe() Mechanisms {
	e := ErrNotSupported
	return Mechanisms{Tracepoint: e, RawTracepoint: e, Kprobe: e, Kretprobe: e, KprobeMulti: e, Fentry: e, Uprobe: e, Uretprobe: e,
		Ringbuf: e, Loop: e, TaskPtRegs: e, BTF: e, KernelWatch: e, UserWatch: e}
}

// Lockdown is "": there is no Linux lockdown here.
func Lockdown() string { return "" }

// Detect reports every ability missing (ErrNotSupported).
func Detect() Report {
	r := Report{OS: runtime.GOOS, Machine: runtime.GOARCH}
	r.Abilities = append(r.Abilities, ability("ebpf", "every kernel probe", ErrNotSupported))
	r.Abilities = append(r.Abilities, Probe().List()...)
	r.Abilities = append(r.Abilities, Kallsyms{Addrs: ErrNotSupported, DataSyms: ErrNotSupported}.List()...)
	return r
}

// ProcessHits returns ErrNotSupported.
func (m *Maps) ProcessHits() (map[int]map[int]uint64, error) { return nil, ErrNotSupported }
