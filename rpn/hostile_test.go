package rpn

import (
	"runtime/debug"
	"strings"
	"testing"
)

// TestLongCallChainIsRefusedWithoutRecursion: the static call depth of a
// program whose routines call each other in a chain as long as the program
// is computed without recursing once per call (the verifier's walk did,
// and a hostile PPDF's chain of millions of calls overflowed the Go
// stack). The test runs with a small stack limit so that a recursive walk
// of a 100,000-call chain fails it.
func TestLongCallChainIsRefusedWithoutRecursion(t *testing.T) {
	defer debug.SetMaxStack(debug.SetMaxStack(4 << 20))
	const n = 100000
	// pc 0: call 7; exit 1; then routine i at 7+6i: call the next; ret
	code := append([]byte{byte(OpCall)}, u32(7)...)
	code = append(code, byte(OpExit), 1)
	for i := 0; i < n; i++ {
		code = append(code, byte(OpCall))
		code = append(code, u32(uint32(7+6*(i+1)))...)
		code = append(code, byte(OpRet))
	}
	code = append(code, byte(OpRet))
	_, err := Load(asm(code...))
	if err == nil || !strings.Contains(err.Error(), "calls nest 100001 deep: at most 32") {
		t.Errorf("got %v", err)
	}
	// the same chain closed into a cycle is recursion, checked at run time
	code[len(code)-1] = byte(OpCall)
	code = append(code, u32(7)...)
	code = append(code, byte(OpRet))
	if _, err := Load(asm(code...)); err != nil {
		t.Errorf("cyclic chain: %v", err)
	}
}

// TestListingsEscapeControlBytes: a PPDF is a stranger's file; the text it
// carries (locations, relocation expressions, file names) reaches the
// terminal through disasm and verifier errors with its control bytes
// escaped.
func TestListingsEscapeControlBytes(t *testing.T) {
	m := asm(cat(OpPushD, make([]byte, 8), OpJmp, u32(0x40))...)
	m.Probes[0].Loc.Text = "evil\x1b[2J"
	m.Files = []string{"f\x1b]0;x\x07.dpdf"}
	m.Lines = []LineEntry{{PC: 0, Pos: Pos{File: 0, Line: 1}}}
	m.Relocs = []Reloc{{Off: 1, Expr: "sym\x9b"}}
	// a tracepoint probe's text and field names are a stranger's too
	m.Code = append(m.Code, cat(OpPushField, 0, 0, OpPushField, 1, 0, OpExit, 1)...)
	m.Probes = append(m.Probes, Probe{Kind: ProbeTracepoint, Loc: Location{Text: "a\x1b]2;x\x07:b", Kind: LocTracepoint},
		Entry: m.Probes[0].End, End: uint32(len(m.Code))})
	m.Fields = []string{"f\x1b[1m"}
	var b strings.Builder
	Disasm(&b, m)
	_, err := Load(m)
	if err == nil {
		t.Fatal("jump outside the probe verified")
	}
	out := b.String() + err.Error()
	for i := 0; i < len(out); i++ {
		if c := out[i]; c < 0x20 && c != '\n' || c >= 0x7f {
			t.Fatalf("raw byte %#x in\n%s", c, out)
		}
	}
	for _, want := range []string{`evil\x1b[2J`, `f\x1b]0;x\x07.dpdf:1`, `sym\x9b`, `tracepoint = a\x1b]2;x\x07:b`,
		`fields f\x1b[1m`, `push field,f\x1b[1m`, `push field,#1   ; no such field`} {
		if !strings.Contains(out, want) {
			t.Errorf("%q missing from\n%s", want, out)
		}
	}
}
