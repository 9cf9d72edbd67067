package jit

// Layout says where the compiled code finds the shared state it works on:
// absolute addresses in the target process (the pad's data region, a
// memfd mapped by the process and by gprobes; package pad places them).
type Layout struct {
	LV    uint64 // the module's local variables, Vars words
	GV    uint64 // the global variables, rpn.MaxGVars words
	Probe uint64 // this probe's Counters
	// Switch is the module's switches (engine.SwitchBlock bytes, byte m
	// for minor m: 0 on, non-zero off): the prologue returns at once,
	// counting nothing, while the probe's minor is off, and enable and
	// disable store 0 and 1 to their minor's byte. 0: no switches (no
	// check; enable and disable are not compiled).
	Switch uint64
	// Clock converts the time stamp counter to nanoseconds for push ts:
	// ns = NS0 + ((rdtsc - TSC0) * Mult) >> Shift (128-bit product).
	Clock uint64
	// NoTSC is a byte: non-zero, the process traps rdtsc (PR_SET_TSC,
	// PR_TSC_SIGSEGV) and the hit's time is read with the
	// clock_gettime(CLOCK_REALTIME) system call instead (not the vDSO's,
	// which reads the TSC). 0: no such byte, always rdtsc.
	NoTSC uint64
	// Threads is the thread table for push procid (and, with PidNS, push
	// pid and push tid): ThreadSlots entries of ThreadEntry bytes, {tid
	// uint32, index uint32, root tid uint32, root pid uint32}, where tid is
	// the id the thread itself sees (gettid) and the root ids are gprobes'
	// (the same unless the process runs in a pid namespace of its own).
	// Open addressing, first probe at uint32(tid*0x9e3779b1) >>
	// (32-ThreadBits) (a 32-bit product), then linear, wrapping; an empty
	// slot (tid 0) ends the search, a tombstone (tid 0xffffffff) does not.
	// A tid not found is an invalid-operand exception. The first 8 bytes
	// are read with one load, and written last (one store), the root ids
	// first.
	Threads uint64
	// PidNS: the process runs in a pid namespace of its own, where
	// getpid and gettid give ids gprobes never reports: push pid and
	// push tid read the root ids from the thread table instead.
	PidNS bool
	// FSGSBase: the kernel lets user code run rdfsbase/rdgsbase
	// (AT_HWCAP2 bit 1). Without it push r,fs_base/gs_base asks the
	// kernel (arch_prctl ARCH_GET_FS/GS, a system call per read); only
	// if that fails is it an invalid-operand exception.
	FSGSBase bool
}

// Thread table geometry (Layout.Threads).
const (
	ThreadBits  = 12
	ThreadSlots = 1 << ThreadBits
	ThreadEntry = 16
)

// Counters is one probe's run-time state in the data region, updated by
// every thread that runs the probe. The layout is fixed: the compiled
// code addresses the fields by offset, gprobes reads them for query.
type Counters struct {
	Hits     uint64 // every arrival at the probe, skipped ones included
	Skipped  uint64 // pass count not reached, disabled, or max hits passed
	Runs     uint64 // program executions
	Faults   uint64 // executions that ended in an exception
	Disabled uint64 // non-zero: max hits reached or rem executed
	Lost     uint64 // records the pad could not commit: the ring was full (the pad counts it)
	Missed   uint64 // hits the pad ran no program for: every pad stack was in use (the pad counts it)
	_        uint64
}

// OffMissed is Counters.Missed's offset, for the pad.
const OffMissed = 48

// StampNS is the bit of a time stamp that says it is a time in ns (the
// NoTSC case), not a time stamp counter.
const StampNS = 1 << 63

// Clock is the layout at Layout.Clock.
type Clock struct {
	TSC0, NS0, Mult, Shift uint64
}

// What the compiled code returns in eax.
const (
	ResultNone      = 0
	ResultCommit    = 1
	ResultException = 2
)

// Unsupported is why a probe cannot be compiled; the probe stays on the
// int3 route and query shows Reason.
type Unsupported struct{ Reason string }

func (u *Unsupported) Error() string { return "not compiled for a jump pad: " + u.Reason }

// Fixup maps a memory-access instruction of the compiled code to the code
// that handles its fault; both are byte offsets from the start of Code.
type Fixup struct{ At, Handler uint32 }

// Code is one compiled probe.
type Code struct {
	Bytes  []byte
	Fixups []Fixup
	// TSC lists the rdtsc instructions, each with the code that reads
	// the time with the system call instead: a process that traps rdtsc
	// gets a SIGSEGV there, which the tracer turns into a jump to it (and
	// sets the NoTSC byte, so that it happens once).
	TSC []Fixup
}

// The scratch area's header (rbx on entry). The pad zeroes OffTSC,
// OffPid and OffTid before the call; the compiled code fills the rest for
// ResultCommit and ResultException and may cache the pid and tid it
// fetched (getpid/gettid) there, for the pad's record, and the hit's time
// stamp (push ts; the pad reads it after the call when the compiled code
// did not and there is a record: push ts and the record's time agree).
// A time stamp is the time stamp counter, or with bit 63 set the time in
// ns since 1970 (the NoTSC case; 1<<63 alone: the time could not be read).
// 0 is "not read yet".
const (
	OffExit       = 0  // u8 exit facility (1, 2; 1 for rem)
	OffException  = 1  // u8 rpn.Exception
	OffTruncated  = 2  // u8 non-zero: the program logged more than logmax
	OffPadFlag    = 3  // u8 the pad's own
	OffMajor      = 4  // u16
	OffMinor      = 6  // u16
	OffPC         = 8  // u32 byte offset of the faulting RPN instruction
	OffLogLen     = 12 // u32 bytes in the log
	OffAddr       = 16 // u64 fault address for invalid-address
	OffTSC        = 24 // u64 the hit's time stamp, 0 until read
	OffPid        = 32 // u64 0 until fetched
	OffTid        = 40 // u64 0 until fetched
	OffPadScratch = 48 // 16 bytes, the pad's own
	OffLog        = 64 // the log, logmax bytes; the compiled code's own state follows
)

// StackUse is the stack the compiled code may use below rsp.
const StackUse = 512
