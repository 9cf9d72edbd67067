package bpf

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gprobes/gprobes/rpn"
)

// Unsupported is why a probe's program cannot run as eBPF: the kernel
// target refuses it at insert. PC is the byte offset in Module.Code of the
// instruction refused (when one is), Where its DPDF position.
type Unsupported struct {
	Probe  int
	PC     uint32
	HasPC  bool
	Where  string // file:line:col of the instruction, when the module has a line table
	Reason string
	// Err, when set, classifies the refusal: ErrNeedsKprobe.
	Err error
}

func (u *Unsupported) Error() string {
	return "not compiled for the kernel: " + where(u.Probe, u.PC, u.HasPC, u.Where) + u.Reason
}

func (u *Unsupported) Unwrap() error { return u.Err }

// TooLarge is a probe's program past one of the kernel's limits on what
// its verifier checks or what eBPF runs (Limit, Max), found before
// anything is loaded: the program needs Need of it, and the instruction
// at PC is where it goes past (its DPDF position Where).
type TooLarge struct {
	Probe  int
	PC     uint32
	HasPC  bool
	Where  string
	Limit  string // the limit, named as the kernel names it
	Need   int
	Max    int
	Reason string
}

func (e *TooLarge) Error() string {
	return fmt.Sprintf("too large for the kernel: %s%s (the kernel's limit: %d, %s)", where(e.Probe, e.PC, e.HasPC, e.Where), e.Reason, e.Max, e.Limit)
}

// ErrNeedsKprobe is what an Unsupported of a KindFentry probe wraps when
// the refusal is fentry's alone (a register a fentry program does not
// see): the same program compiled as KindKprobe, at the function's
// address, can run. errors.Is(err, ErrNeedsKprobe) tells it from a
// refusal no kind escapes (pop mrf ...).
var ErrNeedsKprobe = errors.New("fentry cannot, a kprobe can")

// VerifierError is the kernel's verifier refusing a compiled program,
// mapped back to the RPN instruction whose eBPF the verifier stopped at
// (when it stopped inside one).
type VerifierError struct {
	Probe int
	PC    uint32
	HasPC bool
	Where string
	Insn  int    // the eBPF instruction (raw offset) the verifier stopped at, -1 if unknown
	Msg   string // the verifier's last words
	Err   error  // the error from cilium/ebpf, with the whole log
	Loop  bool   // the program refused was in loop mode
	// Straight is the verifier's refusal of the straight program before
	// this one, in loop mode, was tried (Compiled.Load), nil if none.
	Straight *VerifierError
	// Then is why loop mode, tried after this refusal of the straight
	// program, did not load either, when that was not the verifier's
	// refusal (the compiler's, Budget's, the system call's).
	Then error
}

func (e *VerifierError) Error() string {
	const refused = "the kernel's verifier refused the program"
	here := where(e.Probe, e.PC, e.HasPC, e.Where) + e.Msg
	switch {
	case e.Straight != nil:
		return refused + " straight: " + where(e.Straight.Probe, e.Straight.PC, e.Straight.HasPC, e.Straight.Where) + e.Straight.Msg + "; and in loop mode: " + here
	case e.Then != nil:
		return refused + " straight: " + here + "; loop mode, tried next, failed too: " + e.Then.Error()
	}
	return refused + ": " + here
}

func (e *VerifierError) Unwrap() error { return e.Err }

func where(probe int, pc uint32, hasPC bool, pos string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "probe %d", probe)
	if hasPC {
		fmt.Fprintf(&b, " pc %#04x", pc)
	}
	if pos != "" {
		b.WriteString(" at " + pos)
	}
	b.WriteString(": ")
	return b.String()
}

// position is the DPDF position of the instruction at byte offset pc.
func position(m *rpn.Module, pc uint32) string {
	if pos, ok := m.LineFor(pc); ok {
		return m.PosString(pos)
	}
	return ""
}

// Why a kprobe or kretprobe could not be placed: AttachKprobe's and
// AttachKretprobe's errors wrap one of these when the kernel said which.
var (
	// ErrNotBoundary: symbol+offset is not an instruction boundary (the
	// kernel decodes the function: EILSEQ).
	ErrNotBoundary = errors.New("not an instruction boundary")
	// ErrUnknownSymbol: the kernel has no such symbol (ENOENT).
	ErrUnknownSymbol = errors.New("unknown kernel symbol")
	// ErrCannotProbe: the kernel refuses to probe there (EINVAL, E2BIG):
	// a function on the kprobe blacklist (the probing machinery itself,
	// noinstr and NOKPROBE_SYMBOL code), or an offset outside the
	// function.
	ErrCannotProbe = errors.New("cannot be probed")
)
