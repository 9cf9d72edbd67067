package bpf

import (
	"github.com/gprobes/gprobes/rpn"
)

// The per-CPU scratch value (one per CPU, in Maps.Scratch): the RPN stack,
// the call stack, the state a program in loop mode keeps between two
// iterations of bpf_loop, the record header and the temporary log. The
// fixed parts come first so that every one of them is at a constant
// offset below 32 KiB (an eBPF load or store has a 16-bit offset); the
// header sits right before the log, so that header and log are one
// contiguous record for bpf_ringbuf_output.
const (
	offStack  = 0   // [32]u64, the RPN stack
	offCalls  = 256 // [32]u64, return block ids of RPN calls (loop mode)
	offState  = 512 // loop mode: what lives in registers otherwise
	offTOS    = offState + 0
	offLogN   = offState + 8
	offDepth  = offState + 16
	offBlock  = offState + 24
	offJumps  = offState + 32       // jumps left before max-jumps
	offStatus = offState + 40       // statusRunning ... statusException
	offBias   = offState + 48       // the process's load bias (Options.Biased), set in the prologue
	offRegs   = 576                 // [numRegs]u64: the ctx registers push r reads, copied at the hit
	offFields = offRegs             // a tracepoint's (no registers): the fields push field reads, copied at the hit
	offIV     = offRegs + numRegs*8 // [8]u64: the call's instance variables (iv.go)
	offIVKey  = offIV + 64          // an entry probe's instance key, 24 bytes
	offHeader = offIVKey + 32
	offLog    = offHeader + HeaderSize
)

// numRegs is rpn.NumRegs, untyped (the arrays below fail to compile when
// they differ).
const numRegs = 30

var (
	_ [numRegs - int(rpn.NumRegs)]struct{}
	_ [int(rpn.NumRegs) - numRegs]struct{}
)

// Status of a program in loop mode, set by the callback when it stops.
const (
	statusRunning   = 0
	statusNone      = 1 // exit 0, abort: nothing to commit
	statusCommit    = 2 // exit 1, exit 2, rem: commit the log
	statusException = 3 // the header holds the exception
)

// HeaderSize is the size of the fixed record header. A record is the
// header followed by LogLen bytes of log.
const HeaderSize = 64

// Offsets of the header's fields (little-endian), in the record and in the
// scratch value (add offHeader).
const (
	HdrProbe     = 0  // u32 Options.Probe
	HdrCPU       = 4  // u32 bpf_get_smp_processor_id
	HdrTID       = 8  // u32 thread id, root PID namespace
	HdrPID       = 12 // u32 process (thread group) id: one store of bpf_get_current_pid_tgid fills both
	HdrTS        = 16 // u64 ns: bpf_ktime_get_ns + the clock offset (Unix time)
	HdrMajor     = 24 // u16
	HdrMinor     = 26 // u16
	HdrExit      = 28 // u8 exit facility (1, 2; 1 for rem); 0 for an exception
	HdrException = 29 // u8 rpn.Exception
	HdrTruncated = 30 // u8 non-zero: the program logged more than logmax
	HdrFlags     = 31 // u8 FlagRem
	HdrPC        = 32 // u32 byte offset in Module.Code of the faulting instruction
	HdrLogLen    = 36 // u32 bytes of log after the header
	HdrAddr      = 40 // u64 the faulting address, for invalid-address
	HdrComm      = 48 // [16]byte bpf_get_current_comm: the task's command name, NUL-padded
)

// FlagRem marks the record of a rem instruction.
const FlagRem = 1

// logArea is the room the scratch value keeps for the log: logmax bytes,
// and as much again for the verifier. It cannot relate two registers (the
// log length and a length popped from the stack and cut to what remains),
// so it proves an access at log+len of size n only when the maximum of
// each fits: log+logmax+logmax. log N and log lv/gv write their words
// whole and cut the length afterwards (up to 2048 bytes past the end).
func logArea(logmax int) int {
	return (2*logmax + 2048 + 8 + 7) &^ 7
}

// stackArea is the room after the log for the stacks a program logs
// (log kstack, then log ustack): bpf_get_stack writes each once, in the
// prologue, rpn.MaxStackFrames addresses at most.
const stackArea = 2 * rpn.MaxStackFrames * 8

// offStacks is where the kernel stack is in the scratch value (the user
// stack follows it, stackArea/2 further).
func offStacks(logmax int) int { return offLog + logArea(logmax) }

// ScratchSize is the size of the per-CPU scratch value for a module's
// logmax.
func ScratchSize(logmax int) int { return offLog + logArea(logmax) + stackArea }

// PerCPULimit is the largest value a per-CPU array holds (the kernel's
// PCPU_MIN_UNIT_SIZE). A larger scratch value is an array with one entry
// per possible CPU, indexed by bpf_get_smp_processor_id.
const PerCPULimit = 32768

// The counters map holds one value: the globals, then one Counters block
// per probe.
const (
	GlobalsSize   = 64
	offClockDelta = 0 // globals: i64 ns, Unix time minus CLOCK_MONOTONIC
	CountersSize  = 64
)

// Offsets of the fields of a probe's counters.
const (
	cntHits     = 0 // only counted (as the pass count's ticket) with a pass count
	cntSkipped  = 8
	cntRuns     = 16
	cntFaults   = 24
	cntDisabled = 32
	cntLost     = 40 // records the ring buffer had no room for
)

// Counters are a probe's counters as the kernel keeps them.
type Counters struct {
	Hits     uint64 // Skipped + Runs
	Skipped  uint64 // pass count not reached, or the probe disabled
	Runs     uint64 // program executions, counted against max hits
	Faults   uint64 // executions that ended in an exception
	Disabled bool   // max hits reached, or rem executed
	Lost     uint64 // records lost: the ring buffer was full
	// Missed are the hits the kernel did not run the program for (another
	// eBPF program was running on the CPU): bpf_prog_info's
	// recursion_misses, filled in by Module.Counters.
	Missed uint64
}

// perCPU reports whether the scratch value of a module with this logmax
// fits a per-CPU array.
func perCPU(logmax int) bool { return ScratchSize(logmax) <= PerCPULimit }
