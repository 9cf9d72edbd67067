// Package coredump writes an ELF core file of a live x86_64 Linux process,
// as gdb's gcore does, without a debugger and without ending the process:
// it is what a probe program's `exit 3` takes. The caller gives the
// registers of every thread (gathered with ptrace) and a reader of the
// process's memory; the package reads the rest from /proc (the memory map
// with its VmFlags, stat, status, cmdline, auxv), plans the whole layout,
// then streams the core to an io.Writer: headers, a PT_NOTE segment
// (NT_PRSTATUS per thread with the probed thread first, NT_PRPSINFO,
// NT_SIGINFO, NT_AUXV, NT_FILE, NT_FPREGSET), and one page-aligned PT_LOAD
// per mapping, copied in chunks of at most 1 MiB. Mappings the kernel will
// not read ([vvar], guard pages, device memory) are written with p_filesz
// 0 and reported in Stats; to a regular file, pages of zeros become holes.
// docs/coredump.md describes the result and how to open it with gdb.
//
// The trap: the caller must keep every thread of the process stopped from
// before it gathers the registers until Write returns, or the core mixes
// registers of one moment with memory of another (and a mapping that
// changes under Write can end the dump with an error). And the registers
// must be gathered by the caller's ptrace thread — the one OS thread that
// attached the tracee, since Linux answers ptrace requests only from it —
// never from the goroutine that calls Write, which itself makes no ptrace
// call and may run anywhere. The package builds on every OS, but only a
// Linux build writes cores: elsewhere Write returns ErrNotSupported.
package coredump
