// Package symbols answers "where is X" for the gprobes compiler and engine:
// it reads symbol sources (ELF files with their .symtab, .dynsym, build ID and
// DWARF; System.map; copies of /proc/kallsyms), recognised by content, and
// resolves symbol names to addresses and back, source lines ("fs/open.c:1234")
// to addresses through the DWARF line tables, and sizeof/offsetof of C types
// through the DWARF type information or, for a kernel without its debug
// package, its BTF (/sys/kernel/btf/vmlinux, or the .BTF section of vmlinux,
// parsed with github.com/cilium/ebpf/btf). Several files combine into a Set that
// every lookup searches, with fixed rules for names defined more than once
// (see Set.Lookup) and errors that carry the candidates and close names.
//
// The trap: every address is the value written in the file. For ET_DYN
// objects (PIE executables, shared libraries) that is the link-time address;
// the engine must add the load bias of the running process before it plants
// a probe. Relocatable objects (.o, .ko) give types only, since their symbols
// have no address until they are loaded.
package symbols
