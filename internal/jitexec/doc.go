// Package jitexec runs compiled probe code inside the test process, for
// the tests and benchmarks of the jit package (compiled programs) and of
// the pad package (the pads' commit routine): the code is copied into an
// executable mapping and called through an assembly trampoline with the
// pad's registers (rbp the frame, rbx the scratch area) on a stack of its
// own. It also catches the code's memory faults the way the tracer does
// for a real pad: a SIGSEGV or SIGBUS at a Fixup's instruction resumes at
// its handler. Linux on amd64 only.
package jitexec
