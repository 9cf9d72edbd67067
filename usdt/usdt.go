// Package usdt reads the static probes sys/sdt.h compiles into a program
// or library (USDT, docs/global.md "USDT"): each is a nop at a place in
// the code and a note in the file's .note.stapsdt section (type 3, owner
// "stapsdt") that gives the nop's address, the address of .stapsdt.base
// as the note was written (a prelinked file's sections may have moved
// since: the difference is added), the address of a semaphore (a 2-byte
// counter the program tests before it computes the arguments; 0 when the
// probe has none), the provider, the name, and where each argument is
// ("-4@%edi 8@-16(%rbp)"). The host target (package kernel) places them
// as uprobes, the process targets (package engine) as breakpoints; both
// read the arguments as parsed here.
package usdt

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/gprobes/gprobes/rpn"
)

// ArgKind is where a usdt argument is.
type ArgKind uint8

const (
	ArgConst ArgKind = iota // a constant: Value
	ArgReg                  // a register: Reg
	ArgMem                  // memory at Reg + Value
)

// Arg is one argument of a usdt probe as its note describes it:
// "-4@%edi" (a signed 4-byte register), "8@-16(%rbp)" (8 bytes of
// memory), "4@$5" (a constant).
type Arg struct {
	Kind   ArgKind
	Size   int  // bytes: 1, 2, 4 or 8
	Signed bool // sign-extended to the word, else zero-extended
	Reg    rpn.Reg
	Value  int64
}

// Read is the argument's value at a hit: reg reads a register of the
// thread that hit (the 64-bit register: the note's size says how many of
// its low bytes), read the process's memory. A register's or memory's
// value is sign- or zero-extended from its size to 64 bits; a constant is
// the value written. False when a register or the
// memory cannot be read.
func (a Arg) Read(reg func(rpn.Reg) (uint64, bool), read func(addr uint64, p []byte) bool) (uint64, bool) {
	var v uint64
	switch a.Kind {
	case ArgConst:
		// as written, whatever its size (the host target's eBPF does
		// the same)
		return uint64(a.Value), true
	case ArgReg:
		r, ok := reg(a.Reg)
		if !ok {
			return 0, false
		}
		v = r
	case ArgMem:
		r, ok := reg(a.Reg)
		if !ok || a.Size < 1 || a.Size > 8 {
			return 0, false
		}
		var b [8]byte
		if !read(r+uint64(a.Value), b[:a.Size]) {
			return 0, false
		}
		v = binary.LittleEndian.Uint64(b[:])
	default:
		return 0, false
	}
	return Extend(v, a.Size, a.Signed), true
}

// Extend sign- or zero-extends the low size bytes of v to 64 bits.
func Extend(v uint64, size int, signed bool) uint64 {
	if size >= 8 || size <= 0 {
		return v
	}
	sh := uint(64 - 8*size)
	if signed {
		return uint64(int64(v<<sh) >> sh)
	}
	return v << sh >> sh
}

// Site is one site of a static probe.
type Site struct {
	PC   uint64 // link-time address of the nop (.stapsdt.base adjustment made)
	Sema uint64 // link-time address of the semaphore, 0 if none
	Args []Arg
	// ArgText is the note's argument descriptions as written
	// ("-4@%eax 8@-80(%rbx)")
	ArgText string
	// argErr, when set, says why the arguments cannot be read (an
	// operand form gprobes does not read): push arg is refused, the
	// probe without it goes in
	ArgErr string
}

// Sites reads the file's notes for PROVIDER:NAME; the second result
// is every PROVIDER:NAME the file has, in note order.
func Sites(path, provider, name string) ([]Site, []string, error) {
	ef, err := elf.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer ef.Close()
	sec := ef.Section(".note.stapsdt")
	if sec == nil {
		return nil, nil, fmt.Errorf("%s has no static probes (no .note.stapsdt section)", path)
	}
	b, err := sec.Data()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: .note.stapsdt: %w", path, err)
	}
	var base uint64
	var hasBase bool
	if s := ef.Section(".stapsdt.base"); s != nil {
		base, hasBase = s.Addr, true
	}
	var out []Site
	var all []string
	le := binary.LittleEndian
	for len(b) >= 12 {
		namesz, descsz, typ := le.Uint32(b), le.Uint32(b[4:]), le.Uint32(b[8:])
		b = b[12:]
		nlen, dlen := int(namesz+3)&^3, int(descsz+3)&^3
		if nlen > len(b) || nlen+dlen > len(b) || int(descsz) > dlen {
			return nil, nil, fmt.Errorf("%s: .note.stapsdt: a note runs past the section", path)
		}
		owner := string(bytes.TrimRight(b[:namesz], "\x00"))
		desc := b[nlen : nlen+int(descsz)]
		b = b[nlen+dlen:]
		if typ != 3 || owner != "stapsdt" || len(desc) < 24 {
			continue
		}
		pc, noteBase, sema := le.Uint64(desc), le.Uint64(desc[8:]), le.Uint64(desc[16:])
		strs := strings.SplitN(string(desc[24:]), "\x00", 4)
		if len(strs) < 3 {
			continue
		}
		all = append(all, strs[0]+":"+strs[1])
		if strs[0] != provider || strs[1] != name {
			continue
		}
		if hasBase && noteBase != 0 {
			pc += base - noteBase
		}
		site := Site{PC: pc, Sema: sema, ArgText: strs[2]}
		site.Args, err = ParseArgs(strs[2])
		if err != nil {
			site.ArgErr = err.Error()
		}
		out = append(out, site)
	}
	return out, all, nil
}

// ParseArgs reads a note's argument descriptions: "SIZE@OPERAND"
// separated by spaces, SIZE negative for a signed value; OPERAND a
// register (%edi), a constant ($5), memory at a register plus a
// displacement (-16(%rbp), (%rax)), or a symbol relative to rip
// (counter(%rip), counter+8(%rip)), read at the symbol's address in the
// process. An index register (8(%rax,%rbx,8)) is refused.
func ParseArgs(s string) ([]Arg, error) {
	var out []Arg
	for _, f := range strings.Fields(s) {
		sz, op, ok := strings.Cut(f, "@")
		if !ok {
			return nil, fmt.Errorf("argument %d %q: no SIZE@", len(out)+1, f)
		}
		n, err := strconv.Atoi(sz)
		if err != nil || n == 0 || abs(n) > 8 || abs(n)&(abs(n)-1) != 0 {
			return nil, fmt.Errorf("argument %d %q: size %q", len(out)+1, f, sz)
		}
		a := Arg{Size: abs(n), Signed: n < 0}
		switch {
		case strings.HasPrefix(op, "$"):
			v, err := strconv.ParseInt(op[1:], 0, 64)
			if err != nil {
				return nil, fmt.Errorf("argument %d %q: constant %q", len(out)+1, f, op)
			}
			a.Kind, a.Value = ArgConst, v
		case strings.HasPrefix(op, "%"):
			r, err := noteReg(op[1:])
			if err != nil {
				return nil, fmt.Errorf("argument %d %q: %v", len(out)+1, f, err)
			}
			a.Kind, a.Reg = ArgReg, r
		case strings.HasSuffix(op, ")") && strings.Contains(op, "("):
			i := strings.LastIndex(op, "(")
			disp, inner := op[:i], op[i+1:len(op)-1]
			if strings.Contains(inner, ",") {
				return nil, fmt.Errorf("argument %d %q: an index register: not read by gprobes", len(out)+1, f)
			}
			r, err := noteReg(strings.TrimPrefix(inner, "%"))
			if err != nil {
				return nil, fmt.Errorf("argument %d %q: %v", len(out)+1, f, err)
			}
			a.Kind, a.Reg = ArgMem, r
			if disp != "" {
				v, err := strconv.ParseInt(disp, 0, 64)
				if err != nil {
					return nil, fmt.Errorf("argument %d %q: a displacement gprobes does not read (%q: a symbol is read only relative to rip, not yet)", len(out)+1, f, disp)
				}
				a.Value = v
			}
		default:
			return nil, fmt.Errorf("argument %d %q: operand %q not read by gprobes", len(out)+1, f, op)
		}
		out = append(out, a)
	}
	return out, nil
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// noteReg is the 64-bit register a note's register name (any width) is
// part of: %eax, %ax and %al are rax's low bytes (the note's size says
// how many); the high bytes (%ah) are refused.
func noteReg(name string) (rpn.Reg, error) {
	alias := map[string]string{
		"eax": "rax", "ax": "rax", "al": "rax", "ebx": "rbx", "bx": "rbx", "bl": "rbx",
		"ecx": "rcx", "cx": "rcx", "cl": "rcx", "edx": "rdx", "dx": "rdx", "dl": "rdx",
		"esi": "rsi", "si": "rsi", "sil": "rsi", "edi": "rdi", "di": "rdi", "dil": "rdi",
		"ebp": "rbp", "bp": "rbp", "bpl": "rbp", "esp": "rsp", "sp": "rsp", "spl": "rsp",
	}
	n := strings.ToLower(name)
	if a, ok := alias[n]; ok {
		n = a
	} else if strings.HasPrefix(n, "r") {
		n = strings.TrimRight(n, "dwb") // r8d, r8w, r8b
	}
	r, ok := rpn.LookupReg(rpn.ArchX86_64, n)
	if !ok || r.Is32() {
		return 0, fmt.Errorf("register %%%s: not one gprobes reads", name)
	}
	return r.Canonical(), nil
}
