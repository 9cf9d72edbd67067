// Package rpn is the probe machine: the opcode set, the verifier, the
// disassembler and the virtual machine that runs a probe's program on
// every hit. The compiler from a parsed DPDF to this bytecode is package
// compiler, above rpn: rpn does not link the DPDF parser. The machine reaches the
// outside world only through the Env interface (registers, memory that can
// fault, system values, IO), so the same machine serves gprobes sim, the
// engine and every target. A tracepoint probe's push field asks the Env
// for the event's field through the optional FieldEnv interface; an Env
// without it makes push field an invalid-operand exception. Likewise enable
// and disable ask the optional Switcher (without it: invalid-operand), and
// push iv and pop iv the optional IVEnv for the call's instance variables
// (without it: eight zero words of the hit's own).
//
// The trap: bytecode from anywhere (a PPDF file above all) is untrusted.
// Only Load turns a Module into a runnable Program, after verifying it; a
// Module must not be changed once loaded, and a Machine runs one hit at a
// time: use one per CPU or thread, and guard a module's variables and probe
// state when several machines share them.
package rpn
