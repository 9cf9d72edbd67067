// Package x86 knows x86 instructions well enough to probe them: it finds
// instruction boundaries (CheckBoundary), decodes and classifies the
// instruction a probe displaces (Decode, Classify: Emulate, Boost, Step,
// Branch or Refuse), computes the common ones exactly so no single-step is
// needed (EmulateInsn, EmulateBranch: about 40 ns against 13 µs for a
// single-step trap), and prepares and fixes up out-of-line execution in an
// XOL slot (PrepareXOL, FixupAfterStep, SlotPC). Lengths and operand
// positions come from this package's own structural decoder, checked
// against objdump on all of libc; meanings come from golang.org/x/arch's
// x86asm; emulation is checked against the CPU it runs on. docs/x86.md
// describes the classes, the emulated set and the slot layout.
//
// The trap: decode the ORIGINAL bytes. Once the engine has planted an int3
// at a probe, memory holds 0xcc there; decoding it gives `int3`, class
// Refuse, and every later instruction boundary is wrong. Keep the saved
// byte and put it back into the buffer before calling Decode or
// CheckBoundary (and do the same for every other probe the buffer
// covers).
package x86
