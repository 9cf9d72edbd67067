package engine

// Signal numbers as the Target interface carries them (Event.Sig, Resume,
// Detach): the Linux x86 numbers, whatever the OS gprobes runs on and
// whatever the backend (a GDB stub's replies are converted by
// gdbremote.LinuxSignal). The engine builds on every OS, so it cannot take
// them from golang.org/x/sys/unix, whose SIGSTOP is 17 on darwin. GDB's
// remote protocol numbers SIGINT and SIGTRAP alike (gdbremote.SigInt,
// gdbremote.SigTrap), but not SIGSTOP.
const (
	SigInt  = 2  // SIGINT
	SigTrap = 5  // SIGTRAP: breakpoints and single-steps
	SigStop = 19 // SIGSTOP: Detach leaves the space stopped for a debugger
)
