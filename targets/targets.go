// Package targets turns a target's name into what probes it: it parses a
// spec — pid:N, exec:PATH [ARGS...], gdb:HOST:PORT, xen:DOMID, kernel, host —
// checks it, names it canonically, and opens it with the backend that
// serves it (an engine.Target under an engine, or the kernel target).
// The command line and the daemon both call it, so a spec means the same
// everywhere and is refused with the same words.
//
// The trap: the opener Open returns must run on the engine's locked OS
// thread (engine.Start calls it there), as ptrace requires.
package targets

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/gdbtarget"
	"github.com/gprobes/gprobes/kernel"
	"github.com/gprobes/gprobes/linuxkernel"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/ptrace"
	"github.com/gprobes/gprobes/xen"
)

// Kind is the kind of a target.
type Kind string

const (
	Pid  Kind = "pid"  // a running process, attached with ptrace
	Exec Kind = "exec" // a program gprobes starts under ptrace
	GDB  Kind = "gdb"  // a guest kernel behind a GDB remote stub
	Xen  Kind = "xen"  // a Xen guest's kernel from dom0
	// Kernel is the running kernel of this machine, through eBPF
	// (package kernel): no Target, a Prober of its own.
	Kernel Kind = "kernel"
	// Host is this machine as a whole (docs/global.md): the kernel as
	// Kernel, and user code in every process that maps a module's file,
	// through the kernel's uprobes (package kernel, Options.User). The
	// target of insert and run when none is given.
	Host Kind = "host"
)

// Default is the target insert, and run without a command, take when
// none is given.
const Default = string(Host)

// Forms is what a spec may look like, for messages.
const Forms = "pid:N, exec:PATH [ARGS...], gdb:HOST:PORT, xen:DOMID, kernel or host"

// Spec is a parsed target.
type Spec struct {
	Kind Kind
	Pid  int      // Pid
	Argv []string // Exec: the program as given, then its arguments
	Addr string   // GDB: HOST:PORT
	Dom  int      // Xen
}

// ErrSpec is wrapped by every error of Parse.
var ErrSpec = errors.New("bad target")

// maxShown is how much of a spec an error message quotes.
const maxShown = 64

func shown(s string) string {
	if len(s) > maxShown {
		s = s[:maxShown] + "..."
	}
	return strconv.Quote(s)
}

// Parse checks a spec. exec: splits its program and arguments at spaces
// (ExecArgv takes an argv as it is).
func Parse(s string) (Spec, error) {
	kind, rest, ok := strings.Cut(s, ":")
	bad := func(want string) (Spec, error) {
		return Spec{}, fmt.Errorf("%w %s: %s", ErrSpec, shown(s), want)
	}
	if kind == string(Kernel) {
		if ok {
			return bad("kernel takes nothing after it: the running kernel and its loaded modules")
		}
		return Spec{Kind: Kernel}, nil
	}
	if kind == string(Host) {
		if ok {
			return bad("host takes nothing after it: this machine's kernel and every process on it")
		}
		return Spec{Kind: Host}, nil
	}
	if !ok {
		return bad("want " + Forms)
	}
	switch Kind(kind) {
	case Pid:
		pid, err := strconv.Atoi(rest)
		if err != nil || pid <= 0 {
			return bad("pid:N with N a process id")
		}
		return Spec{Kind: Pid, Pid: pid}, nil
	case Exec:
		argv := strings.Fields(rest)
		if len(argv) == 0 {
			return bad("exec:PATH [ARGS...]")
		}
		return Spec{Kind: Exec, Argv: argv}, nil
	case GDB:
		// gdbremote.Dial's forms: HOST:PORT, tcp:HOST:PORT, unix:PATH,
		// or a socket's PATH
		switch {
		case strings.HasPrefix(rest, "unix:"):
			if len(rest) == len("unix:") {
				return bad("gdb:unix:PATH")
			}
			return Spec{Kind: GDB, Addr: rest}, nil
		case strings.Contains(rest, "/") && !strings.Contains(rest, ":"):
			return Spec{Kind: GDB, Addr: rest}, nil
		}
		host, port, ok := strings.Cut(strings.TrimPrefix(rest, "tcp:"), ":")
		if !ok || port == "" || strings.ContainsAny(host, " \t") {
			return bad("gdb:HOST:PORT (or gdb:unix:PATH)")
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			return bad("gdb:HOST:PORT with PORT a TCP port")
		}
		return Spec{Kind: GDB, Addr: rest}, nil
	case Xen:
		dom, err := strconv.Atoi(rest)
		if err != nil || dom <= 0 || dom >= 0x7ff0 {
			return bad("xen:DOMID with DOMID a guest domain's id (xl list)")
		}
		return Spec{Kind: Xen, Dom: dom}, nil
	}
	return bad("want " + Forms)
}

// ExecArgv is the spec of a program to start, arguments kept as given.
func ExecArgv(argv []string) Spec { return Spec{Kind: Exec, Argv: argv} }

// String is the spec's canonical name: pid:N, exec:PATH ARGS, gdb:ADDR,
// xen:N.
func (s Spec) String() string {
	switch s.Kind {
	case Pid:
		return "pid:" + strconv.Itoa(s.Pid)
	case Exec:
		return "exec:" + strings.Join(s.Argv, " ")
	case GDB:
		return "gdb:" + s.Addr
	case Xen:
		return "xen:" + strconv.Itoa(s.Dom)
	case Kernel:
		return "kernel"
	case Host:
		return "host"
	}
	return string(s.Kind) + ":?"
}

// Guest reports whether the target is a guest kernel (gdb:, xen:), named
// by its spec; a process is named by its pid once it is open.
func (s Spec) Guest() bool { return s.Kind == GDB || s.Kind == Xen }

// NamedBySpec reports whether the target keeps its spec as its name (a
// guest, the kernel, the host); a process is named pid:N once it is open.
func (s Spec) NamedBySpec() bool { return s.Guest() || s.Local() }

// Local reports whether the target is this machine through eBPF (kernel,
// host): package kernel's target, started by Spec.Start, not an engine's.
func (s Spec) Local() bool { return s.Kind == Kernel || s.Kind == Host }

// Options are what opening a target may need beyond its spec.
type Options struct {
	// Symbols and KASLROffset: a guest kernel's symbol files and slide.
	Symbols     []string
	KASLROffset *int64
	// StubTimeout bounds one request to a GDB stub (0: gdbremote's
	// default).
	StubTimeout time.Duration
	// Env is an exec target's environment (nil: this process's).
	Env []string
	// Dir is an exec target's working directory ("": this process's): a
	// program named by a relative path with a '/' (./prog, bin/prog) is
	// found there, as a shell in Dir would find it.
	Dir string
	// KernelPID restricts the kernel (and host) target's probes to one
	// process and the processes it starts (0: every process).
	KernelPID int
}

// Start opens the target and starts what drives it: an engine over the
// backend's Target, or, for the kernel, the kernel target itself, which
// takes Sink, Warn and RingSize from eo.
func (s Spec) Start(o Options, eo engine.Options) (probe.Prober, error) {
	if s.Local() {
		k, err := kernel.Start(kernel.Options{Sink: eo.Sink, Warn: eo.Warn, RingSize: eo.RingSize, PID: o.KernelPID, Children: o.KernelPID != 0, Symbols: o.Symbols, User: s.Kind == Host})
		if err != nil {
			return nil, err
		}
		return k, nil
	}
	open, err := s.Open(o)
	if err != nil {
		return nil, err
	}
	return engine.Start(open, eo)
}

// Open checks what can be checked before anything is touched (an exec
// program is found in PATH) and returns the opener for engine.Start.
func (s Spec) Open(o Options) (func() (engine.Target, error), error) {
	kopts := linuxkernel.Options{Symbols: o.Symbols, KASLROffset: o.KASLROffset}
	switch s.Kind {
	case Pid:
		return ptrace.Attach(s.Pid), nil
	case Exec:
		if len(s.Argv) == 0 {
			return nil, fmt.Errorf("%w exec: no program", ErrSpec)
		}
		prog := s.Argv[0]
		if o.Dir != "" && strings.Contains(prog, "/") && !filepath.IsAbs(prog) {
			prog = filepath.Join(o.Dir, prog)
		}
		path, err := exec.LookPath(prog)
		if err != nil {
			return nil, fmt.Errorf("target %s: %w", shown(s.String()), err)
		}
		env := o.Env
		if env == nil {
			env = os.Environ()
		}
		return ptrace.Exec(path, s.Argv, env, o.Dir), nil
	case GDB:
		return gdbtarget.Open(s.Addr, gdbtarget.Options{Timeout: o.StubTimeout, Options: kopts}), nil
	case Xen:
		return xen.Open(s.Dom, xen.Options{Options: kopts}), nil
	case Kernel, Host:
		return nil, fmt.Errorf("%w %s: no engine.Target: use Spec.Start", ErrSpec, s.Kind)
	}
	return nil, fmt.Errorf("%w %s: want %s", ErrSpec, shown(s.String()), Forms)
}
