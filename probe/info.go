package probe

import (
	"fmt"

	"github.com/gprobes/gprobes/rpn"
)

// State is the state of a probe as query shows it.
type State string

const (
	StateActive   State = "active"   // inserted; hits run its program
	StatePending  State = "pending"  // its module is not loaded yet (Reason may say more)
	StateDisabled State = "disabled" // max hits reached, rem, or switched off (Reason says which)
	StateMismatch State = "mismatch" // the byte at the location is not its opcode
	StateRefused  State = "refused"  // cannot go there (Reason says why)
	StateGone     State = "gone"     // the target ended
	StateRemoved  State = "removed"
)

// Info is one probe as query reports it.
type Info struct {
	Module   string `json:"module"`
	Minor    uint16 `json:"minor"`
	Location string `json:"location"`
	// File is the file the module's name resolved to where the probe
	// went in (a process's mapped file: "libc" is
	// /usr/lib/x86_64-linux-gnu/libc.so.6); "" before
	File string `json:"file,omitempty"`
	// Log is how the program lays out a record's data, as
	// rpn.FormatLayouts spells it ("w8 s": a word, then a string; "|"
	// between the sequences a hit may commit), for readers to show
	// words as numbers and strings as strings; "" when the code alone
	// cannot tell
	Log string `json:"log,omitempty"`
	// Format is the probe's format = "...", how its records read
	Format  string `json:"format,omitempty"`
	Kind    string `json:"kind,omitempty"` // the probe's kind, when not an offset probe (KindName)
	Address uint64 `json:"address"`
	State   State  `json:"state"`
	Reason  string `json:"reason,omitempty"`
	How     string `json:"how,omitempty"` // how it runs: emulate, boost, step, branch, jump, fentry, kprobe...
	Hits    uint64 `json:"hits"`
	Skipped uint64 `json:"skipped"`
	Faults  uint64 `json:"faults"`
	// Missed are hits whose program did not run: the kernel target's
	// hits the kernel skipped (another eBPF program was running on the
	// CPU, kprobes' own misses); a return probe's calls beyond maxactive
	Missed uint64 `json:"missed,omitempty"`
	// Dropped are a return probe's calls whose return was never seen
	// (a longjmp or an exception out of the function, a thread that
	// exited inside it): their records were never made
	Dropped uint64 `json:"dropped,omitempty"`
	// Lost is how many records the target could not hand over (a jump
	// pad's ring, a kernel module's ring was full)
	Lost   uint64 `json:"lost,omitempty"`
	Spaces int    `json:"spaces"` // address spaces it is inserted in
	// Writes says what the probe's program writes in its target:
	// "registers", "user registers", "memory", "port IO" (rpn.WriteKinds);
	// "" when it only reads
	Writes string `json:"writes,omitempty"`
	// Processes are the probe's hits by process, most first, when asked
	// of a target that counts them (ProcessQuerier: the host target's
	// user probes)
	Processes []ProcessHits `json:"processes,omitempty"`
}

// ProcessHits are one process's hits of a probe.
type ProcessHits struct {
	Pid int `json:"pid"`
	// Comm is the process's command name as /proc shows it at the
	// query, "" when it has exited
	Comm string `json:"comm,omitempty"`
	Hits uint64 `json:"hits"`
}

// ProcessQuerier is a Prober that counts each probe's hits by process:
// QueryProcesses is Query with Info.Processes filled in.
type ProcessQuerier interface {
	QueryProcesses() []Info
}

// KindName is a probe's kind as query and log show it: "" for an offset
// probe (the kind everything had before there were others), else the
// keyword that starts its definition ("retprobe", "watch",
// "tracepoint").
func KindName(d *rpn.Probe) string {
	if d.Kind == rpn.ProbeOffset {
		return ""
	}
	return d.Kind.String()
}

// ReasonEnded is query's reason for a probe that max hits or rem ended.
const ReasonEnded = "max hits reached or rem ran: it stays off (enable does not revive it)"

// ReasonSwitchedOff is query's reason for a probe switched off.
func ReasonSwitchedOff(minor uint16) string {
	return fmt.Sprintf("switched off: enable %d in a program, or gprobes enable --minor %d, switches it on", minor, minor)
}

// ModuleVars are a module's variables at the end (Final).
type ModuleVars struct {
	Name   string
	LV, GV []uint64
}

// Final is the last look at a Prober, taken by Close.
type Final struct {
	Vars   []ModuleVars
	Probes []Info
}
