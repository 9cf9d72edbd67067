package rpn

import (
	"encoding/binary"
	"fmt"
	"io"
	"strings"

	"github.com/gprobes/gprobes/internal/escape"
)

// Disasm writes the listing of a whole module: its header, and for each
// probe its keywords and program, one instruction per line with its byte
// offset and DPDF source position.
func Disasm(w io.Writer, m *Module) {
	h := m.Header
	fmt.Fprintf(w, "module %q modtype=%s arch=%s major=%d jmpmax=%d logmax=%d dfltexit=%d vars=%d gvars=%d\n",
		h.Name, h.ModType, h.Arch, h.Major, h.JmpMax, h.LogMax, h.DfltExit, h.Vars, h.GVars)
	if len(m.BuildID) > 0 {
		fmt.Fprintf(w, "build-id %x\n", m.BuildID)
	}
	if len(m.Fields) > 0 {
		fmt.Fprintf(w, "fields")
		for _, f := range m.Fields {
			fmt.Fprintf(w, " %s", escape.String(f))
		}
		fmt.Fprintln(w)
	}
	for i, p := range m.Probes {
		// the keyword the probe starts with, as a DPDF writes it
		fmt.Fprintf(w, "\nprobe %d: %s = %s", i, p.Kind, escape.String(p.Loc.Text))
		if p.Kind == ProbeWatch {
			fmt.Fprintf(w, ",%d,%s", p.WatchLen, p.WatchMode)
		}
		switch {
		case p.Loc.Kind == LocAbsolute, p.Loc.Kind == LocTracepoint:
		case p.Loc.Resolved:
			fmt.Fprintf(w, " = %#x", p.Loc.Addr)
		default:
			fmt.Fprintf(w, " (resolved at insert)")
		}
		fmt.Fprintf(w, "  ")
		if p.Kind == ProbeRetprobe {
			fmt.Fprintf(w, "maxactive=%d ", p.ActiveLimit())
		}
		fmt.Fprintf(w, "minor=%d", p.Minor)
		if p.HasOpcode {
			fmt.Fprintf(w, " opcode=%#02x", p.Opcode)
		}
		if p.PassCount != 0 {
			fmt.Fprintf(w, " passcount=%d", p.PassCount)
		}
		if p.MaxHits != 0 {
			fmt.Fprintf(w, " maxhits=%d", p.MaxHits)
		}
		if p.LogOnFault {
			fmt.Fprintf(w, " logonfault=yes")
		}
		if p.AutoStack {
			fmt.Fprintf(w, " autostacktrace=yes")
		}
		if p.Disabled {
			fmt.Fprintf(w, " enabled=no")
		}
		fmt.Fprintf(w, "  (%s)\n", m.PosString(Pos{File: p.Pos.File, Line: p.Pos.Line}))
		disasmRange(w, m, p.Entry, p.End, ^uint32(0))
	}
}

// disasmRange lists the instructions in Code[from:to]. It decodes the
// bytes directly, so it also lists code that failed verification; mark
// flags one instruction with "=>".
func disasmRange(w io.Writer, m *Module, from, to, mark uint32) {
	relocs := map[uint32]Reloc{}
	for _, r := range m.Relocs {
		relocs[r.Off] = r
	}
	if to > uint32(len(m.Code)) {
		to = uint32(len(m.Code))
	}
	var lastPos Pos
	for pc := from; pc < to; {
		op := Opcode(m.Code[pc])
		n := op.Len()
		prefix := "  "
		if pc == mark {
			prefix = "=>"
		}
		var text string
		if n == 0 || pc+uint32(n) > to {
			text = fmt.Sprintf(".byte %#02x", m.Code[pc])
			n = 1
		} else {
			text = formatInsn(m, pc, m.Code[pc:pc+uint32(n)], relocs)
		}
		line := ""
		if pos, ok := m.LineFor(pc); ok && pos != lastPos {
			line = m.PosString(Pos{File: pos.File, Line: pos.Line})
			lastPos = pos
		}
		if line != "" {
			fmt.Fprintf(w, "%s %04x  %-28s %s\n", prefix, pc, text, line)
		} else {
			fmt.Fprintf(w, "%s %04x  %s\n", prefix, pc, strings.TrimRight(text, " "))
		}
		pc += uint32(n)
	}
}

// formatInsn prints one encoded instruction in DPDF syntax.
func formatInsn(m *Module, pc uint32, b []byte, relocs map[uint32]Reloc) string {
	op := Opcode(b[0])
	name := op.String()
	sep := " "
	if strings.Contains(name, " ") {
		sep = ","
	}
	switch opTable[op].format {
	case fmtTarget:
		return fmt.Sprintf("%s %#04x", name, binary.LittleEndian.Uint32(b[1:]))
	case fmtU8:
		return fmt.Sprintf("%s%s%d", name, sep, b[1])
	case fmtU16:
		v := binary.LittleEndian.Uint16(b[1:])
		switch op {
		case OpPushR, OpPopR, OpPushU, OpPopU:
			return fmt.Sprintf("%s,%s", name, Reg(v))
		case OpPushField:
			if int(v) < len(m.Fields) {
				return fmt.Sprintf("%s,%s", name, escape.String(m.Fields[v]))
			}
			return fmt.Sprintf("%s,#%d   ; no such field", name, v)
		}
		return fmt.Sprintf("%s%s%d", name, sep, v)
	case fmtU16U16:
		return fmt.Sprintf("%s,%d,%d", name, binary.LittleEndian.Uint16(b[1:]), binary.LittleEndian.Uint16(b[3:]))
	case fmtU64:
		v := binary.LittleEndian.Uint64(b[1:])
		s := fmt.Sprintf("%s,%#x", name, v)
		if v < 10 {
			s = fmt.Sprintf("%s,%d", name, v)
		}
		if r, ok := relocs[pc+1]; ok {
			if r.Resolved {
				s += fmt.Sprintf("   ; %s", escape.String(r.Expr))
			} else {
				s = fmt.Sprintf("%s,%s   ; resolved at insert", name, escape.String(r.Expr))
			}
		}
		return s
	}
	return name
}
