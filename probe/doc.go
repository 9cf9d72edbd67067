// Package probe is the contract between what runs probes and what uses
// their results, and the book every runner keeps of what was inserted.
//
// Above it: the daemon, `gprobes run` and the record writers (timeline,
// ctf, perfetto, otlp, metrics...), which know a Prober, its Records
// and its Info, and nothing of how probes run. Below it: the mechanisms
// that run them, which implement Prober — the stop-based engine (package
// engine: int3s, jump pads, return probes and watches in processes and
// guest kernels) and the running kernel through eBPF (package kernel).
//
// What is written once here for every Prober:
//
//   - the contract: Record, Sink, Info and its States, InsertMode,
//     Final, Prober and its optional abilities (PackInserter,
//     SymbolAdder);
//   - build selection: which build of a pack runs where (SelectBuild);
//   - locations and relocations: a probe's address and a program's
//     push d, values where a module runs, from live symbols or, failing
//     that, from the values computed at build time (Resolver), and the
//     adapter of a symbols.Set to those questions (Symbols);
//   - the book (Book): modules in insertion order, their sources (one an
//     insert, a merge adds one) and logical probes; insert, merge and
//     replace, remove, switches, variables and query, with the same
//     answers and the same errors whatever runs the probes. A Prober
//     gives the book its Mechanism: what places probes, takes them out
//     and counts their hits.
//
// The package imports only rpn and symbols, so a writer of records links
// neither the x86 decoder nor the JIT nor eBPF.
package probe
