// Package ppdf reads and writes PPDF files, the pre-built form of a DPDF: a
// compiled rpn.Module (header, probes with their kinds and locations,
// bytecode, line map, source file table, relocations, tracepoint field names
// and the probed module's build ID) in a versioned, checksummed binary file
// that `gprobes build` writes from a Makefile and `gprobes insert` reads on
// the customer's machine. The format is specified at the top of encode.go
// and in docs/ppdf.md; Encode output is byte-identical for identical input,
// and Decode rejects any truncated, tampered, oversized or inconsistent file
// with an error, never a panic. A pack may hold the module compiled for
// several builds of the probed module (version 5: EncodePack, DecodePack;
// the target picks its build, engine.SelectBuild); its signature is a
// separate file (package packsign). The one trap: Decode checks the structure of
// the module (offsets inside the code, indices inside the file table, header
// limits) but not the bytecode itself, which may still jump out of bounds or
// use a bad operand; a caller must run rpn's verifier on the decoded Module
// before executing any of it, exactly as for a freshly compiled one.
package ppdf
