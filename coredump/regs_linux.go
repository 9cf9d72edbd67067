package coredump

import "syscall"

// Regs is a thread's general registers as PTRACE_GETREGS returns them: on
// linux/amd64 the kernel's user_regs_struct, which NT_PRSTATUS carries
// byte for byte.
type Regs = syscall.PtraceRegs
