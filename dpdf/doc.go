// Package dpdf reads dynamic probe definition files (DPDF): the text a user
// writes to say where probes go and what their RPN programs do. It turns a
// file into a header and a list of probes, each with its keywords and its
// statements, every node carrying its position in the user's file; package
// rpn compiles that into bytecode.
//
// A file with '#' directives goes through the system C preprocessor; the
// preprocessor's line markers keep every position in the user's files,
// #include'd ones too. Parse reports every syntax error, not just the
// first, as an ErrorList of "file:line:col: message" with the source line.
//
// The trap: Parse returns a *File even when it also returns errors, so a
// compiler can add its own errors for the statements that did parse; check
// File.Errors (or the returned error) before using the File as correct.
package dpdf
