package rpn

import "strings"

// A module that writes its target can change what the probed code does:
// pop r and pop u set registers (the interrupted context's, or a kernel
// task's saved user-mode ones), pop mrf stores to memory, pop io writes
// an IO port. gprobes says that plainly (check, disasm, query; docs/ppdf.md) and
// a daemon started with --read-only refuses such modules.

// Write is an instruction that writes the target.
type Write struct {
	Probe int    // the probe whose program holds it
	PC    uint32 // its byte offset in the code
	Op    Opcode
	What  string // "registers", "user registers", "memory", "port IO"
	Pos   string // its DPDF position, file:line:col
}

// writeKinds are the writing opcodes and what each writes.
var writeKinds = map[Opcode]string{
	OpPopR:   "registers",
	OpPopU:   "user registers",
	OpPopMrf: "memory",
	OpPopIO:  "port IO",
}

// Writes lists the instructions of m's probes that write the target, in
// probe and code order. Like the engine's other scans of the code it
// trusts the structure Decode or the compiler checked (each probe's
// program inside the code); an instruction cut short ends its probe's
// scan.
func Writes(m *Module) []Write {
	var out []Write
	for i := range m.Probes {
		out = append(out, ProbeWrites(m, i)...)
	}
	return out
}

// ProbeWrites is Writes of one probe.
func ProbeWrites(m *Module, probe int) []Write {
	p := &m.Probes[probe]
	var out []Write
	for pc := p.Entry; pc < p.End && int(pc) < len(m.Code); {
		op := Opcode(m.Code[pc])
		if what, ok := writeKinds[op]; ok {
			pos, _ := m.LineFor(pc)
			out = append(out, Write{Probe: probe, PC: pc, Op: op, What: what, Pos: m.PosString(pos)})
		}
		pc += uint32(max(op.Len(), 1))
	}
	return out
}

// WritesSummary says what writes list, one entry a kind of write with
// its first instruction: "registers (pop r at a.dpdf:5:3), memory (pop
// mrf at a.dpdf:9:3)"; "" when there is none.
func WritesSummary(writes []Write) string {
	var parts []string
	seen := map[string]bool{}
	for _, w := range writes {
		if seen[w.What] {
			continue
		}
		seen[w.What] = true
		parts = append(parts, w.What+" ("+w.Op.String()+" at "+w.Pos+")")
	}
	return strings.Join(parts, ", ")
}

// WriteKinds says what writes list, kinds only: "registers, memory".
func WriteKinds(writes []Write) string {
	var parts []string
	seen := map[string]bool{}
	for _, w := range writes {
		if !seen[w.What] {
			seen[w.What] = true
			parts = append(parts, w.What)
		}
	}
	return strings.Join(parts, ", ")
}
