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
