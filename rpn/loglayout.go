package rpn

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A record's data is the bytes its program logged, flat: words, the
// bytes of strings (log str, without their NUL) and of memory (log mrf),
// with nothing between them. What was logged where is in the program:
// LogLayouts finds, from the bytecode, the sequences of log instructions
// a hit may commit, and Layout.Split cuts a record's data by them, so a
// reader shows words as numbers and strings as strings.

// LogItem is one log instruction's part of a record: Size bytes of a
// word (Kind 'w'), or a string (Kind 's', log str) or memory (Kind 'm',
// log mrf) of a length the program knows only at run time (Size 0), or a
// stack (Kind 'u', log ustack,N; Kind 'k', log kstack,N): N 8-byte
// addresses, Size 8N bytes, zeros after the last frame.
type LogItem struct {
	Kind byte
	Size int
}

// Stack reports whether the item is a stack (log ustack, log kstack).
func (it LogItem) Stack() bool { return it.Kind == 'u' || it.Kind == 'k' }

// Fixed reports whether the item's size is known from the code.
func (it LogItem) Fixed() bool { return it.Kind == 'w' || it.Stack() }

// Frames are the addresses of a stack item's bytes, without the zeros
// after the last frame.
func (v Value) Frames() []uint64 {
	var out []uint64
	for i := 0; i+8 <= len(v.Bytes); i += 8 {
		a := binary.LittleEndian.Uint64(v.Bytes[i:])
		if a == 0 {
			break
		}
		out = append(out, a)
	}
	return out
}

// Layout is one sequence of log items a hit may commit.
type Layout []LogItem

// String spells a layout: "w8 w8 s" (two words, a string).
func (l Layout) String() string {
	var parts []string
	for _, it := range l {
		if it.Kind == 'w' {
			parts = append(parts, "w"+strconv.Itoa(it.Size))
		} else if it.Stack() {
			parts = append(parts, string(it.Kind)+strconv.Itoa(it.Size/8))
		} else {
			parts = append(parts, string(it.Kind))
		}
	}
	return strings.Join(parts, " ")
}

// ParseLayouts reads what FormatLayouts wrote.
func ParseLayouts(s string) ([]Layout, error) {
	var out []Layout
	if s == "" {
		return nil, nil
	}
	for _, alt := range strings.Split(s, "|") {
		var l Layout
		for _, f := range strings.Fields(alt) {
			switch {
			case f == "s" || f == "m":
				l = append(l, LogItem{Kind: f[0]})
			case strings.HasPrefix(f, "u") || strings.HasPrefix(f, "k"):
				n, err := strconv.Atoi(f[1:])
				if err != nil || n < 1 || n > MaxStackFrames {
					return nil, fmt.Errorf("log layout %q: bad item %q", s, f)
				}
				l = append(l, LogItem{Kind: f[0], Size: 8 * n})
			case strings.HasPrefix(f, "w"):
				n, err := strconv.Atoi(f[1:])
				if err != nil || (n != 4 && n != 8) {
					return nil, fmt.Errorf("log layout %q: bad item %q", s, f)
				}
				l = append(l, LogItem{Kind: 'w', Size: n})
			default:
				return nil, fmt.Errorf("log layout %q: bad item %q", s, f)
			}
		}
		out = append(out, l)
	}
	return out, nil
}

// FormatLayouts spells layouts for a probe's query answer: "w8 s|w8",
// "" for none known.
func FormatLayouts(ls []Layout) string {
	var parts []string
	for _, l := range ls {
		parts = append(parts, l.String())
	}
	return strings.Join(parts, "|")
}

// maxLayoutItems and maxLayoutStates bound the search: a program that
// logs in a loop, or has too many paths, has no layout.
const (
	maxLayoutItems  = 64
	maxLayoutStates = 4096
	maxLayouts      = 8
)

// LogLayouts are the sequences of log items the probe's program may
// commit (exit 1-4, rem), each once; nil when they cannot be known from
// the code alone (a pop lp, a loop that logs, too many paths). Like
// ProbeWrites it trusts the structure the verifier checked, and gives up
// on anything else.
func LogLayouts(m *Module, probe int) []Layout {
	if probe < 0 || probe >= len(m.Probes) {
		return nil
	}
	p := &m.Probes[probe]
	w := 8
	if m.Arch == ArchI386 {
		w = 4
	}
	type state struct {
		pc    uint32
		items Layout
		calls []uint32
	}
	seen := map[string]bool{}
	var out []Layout
	have := map[string]bool{}
	stack := []state{{pc: p.Entry}}
	states := 0
	for len(stack) > 0 {
		st := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for {
			if st.pc < p.Entry || st.pc >= p.End || int(st.pc) >= len(m.Code) {
				return nil
			}
			key := fmt.Sprint(st.pc, st.items.String(), st.calls)
			if seen[key] {
				break // a path already taken: the same items follow
			}
			seen[key] = true
			if states++; states > maxLayoutStates || len(st.items) > maxLayoutItems {
				return nil
			}
			op := Opcode(m.Code[st.pc])
			n := op.Len()
			if n == 0 || int(st.pc)+n > len(m.Code) {
				return nil
			}
			b := m.Code[st.pc:]
			next := st.pc + uint32(n)
			switch op {
			case OpLogN:
				for i := 0; i < int(b[1]); i++ {
					st.items = append(slicesClone(st.items), LogItem{Kind: 'w', Size: w})
				}
			case OpLogLV, OpLogGV:
				for i := 0; i < int(binary.LittleEndian.Uint16(b[3:])); i++ {
					st.items = append(slicesClone(st.items), LogItem{Kind: 'w', Size: w})
				}
			case OpLogUStack, OpLogKStack:
				k := byte('u')
				if op == OpLogKStack {
					k = 'k'
				}
				st.items = append(slicesClone(st.items), LogItem{Kind: k, Size: 8 * int(b[1])})
			case OpLogStr:
				st.items = append(slicesClone(st.items), LogItem{Kind: 's'})
			case OpLogMrf:
				st.items = append(slicesClone(st.items), LogItem{Kind: 'm'})
			case OpPopLP:
				return nil
			case OpExit, OpRem, OpAbort:
				if op == OpRem || (op == OpExit && b[1] != ExitNone) {
					if k := st.items.String(); !have[k] {
						have[k] = true
						out = append(out, slicesClone(st.items))
						if len(out) > maxLayouts {
							return nil
						}
					}
				}
				goto done
			case OpRet:
				if len(st.calls) == 0 {
					return nil
				}
				next = st.calls[len(st.calls)-1]
				st.calls = st.calls[: len(st.calls)-1 : len(st.calls)-1]
			case OpCall:
				if len(st.calls) >= MaxCallDepth {
					return nil
				}
				st.calls = append(st.calls[:len(st.calls):len(st.calls)], next)
				next = binary.LittleEndian.Uint32(b[1:])
			case OpJmp:
				next = binary.LittleEndian.Uint32(b[1:])
			default:
				if op.IsJump() { // conditional: both ways
					stack = append(stack, state{pc: binary.LittleEndian.Uint32(b[1:]), items: st.items, calls: st.calls})
				}
			}
			st.pc = next
		}
	done:
	}
	return out
}

func slicesClone(l Layout) Layout { return append(Layout(nil), l...) }

// Value is one logged item of a record as a reader shows it.
type Value struct {
	Item  LogItem
	Bytes []byte
}

// String shows a word as a number (decimal, or hex from 2^32 up: an
// address), a string quoted, memory quoted when it is text and in hex
// otherwise.
func (v Value) String() string {
	switch v.Item.Kind {
	case 'w':
		var x int64
		if len(v.Bytes) == 8 {
			x = int64(binary.LittleEndian.Uint64(v.Bytes))
		} else {
			x = int64(int32(binary.LittleEndian.Uint32(v.Bytes)))
		}
		if x >= -(1<<31) && x < 1<<32 {
			return strconv.FormatInt(x, 10)
		}
		return "0x" + strconv.FormatUint(uint64(x), 16)
	case 's':
		return strconv.Quote(string(v.Bytes))
	case 'u', 'k':
		var parts []string
		for _, a := range v.Frames() {
			parts = append(parts, "0x"+strconv.FormatUint(a, 16))
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	if isText(v.Bytes) {
		return strconv.Quote(string(v.Bytes))
	}
	return "0x" + fmt.Sprintf("%x", v.Bytes)
}

// isText: valid UTF-8 without control characters other than tab and
// newline (a NUL ends a C string: trailing NULs allowed).
func isText(b []byte) bool {
	b = []byte(strings.TrimRight(string(b), "\x00"))
	if len(b) == 0 || !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if r < 0x20 && r != '\t' && r != '\n' {
			return false
		}
	}
	return true
}

// Split cuts a record's data by the first of layouts it fits: the words
// where they are, the one string or memory item (at most one per layout
// is cut) the bytes left. false when none fits (data of another program,
// or cut short: truncated).
func Split(layouts []Layout, data []byte) ([]Value, bool) {
	var fit []Value
	found := 0
	for _, l := range layouts {
		fixed, vars := 0, 0
		for _, it := range l {
			if it.Fixed() {
				fixed += it.Size
			} else {
				vars++
			}
		}
		if vars > 1 || fixed > len(data) || (vars == 0 && fixed != len(data)) {
			continue
		}
		vals := make([]Value, 0, len(l))
		off := 0
		for _, it := range l {
			n := it.Size
			if !it.Fixed() {
				n = len(data) - fixed
			}
			vals = append(vals, Value{Item: it, Bytes: data[off : off+n]})
			off += n
		}
		if found++; found == 1 {
			fit = vals
		} else if !sameCut(fit, vals) {
			return nil, false // two readings: none is sure
		}
	}
	return fit, found > 0
}

func sameCut(a, b []Value) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Item != b[i].Item || len(a[i].Bytes) != len(b[i].Bytes) {
			return false
		}
	}
	return true
}
