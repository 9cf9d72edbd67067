// Package compiler turns a parsed DPDF (package dpdf) into a verified
// module of rpn bytecode. It sits above both: rpn, the JIT, the eBPF
// compiler and the engine run bytecode without linking the DPDF parser.
// What the compiler and rpn's verifier share (the register and size
// checks, the Resolver for build-time symbols, CompileOptions) is declared
// in rpn.
package compiler
