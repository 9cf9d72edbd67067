package rpn_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/rpn"
)

// stackEnv is flatEnv with a StackEnv: the frames it gives, or a refusal.
type stackEnv struct {
	*flatEnv
	user, kernel []uint64
	refuse       bool
	asked        []string
}

func (e *stackEnv) Stack(kernel bool, pcs []uint64) (int, bool) {
	e.asked = append(e.asked, fmt.Sprintf("%v/%d", kernel, len(pcs)))
	if e.refuse {
		return 0, false
	}
	fr := e.user
	if kernel {
		fr = e.kernel
	}
	return copy(pcs, fr), true
}

// TestLogStack: log ustack,N and log kstack,N append N words, the
// frames the Env gives innermost first and zeros after them (16 without
// N); more frames than N are cut to N. An Env without StackEnv, or one
// that has no such stack, raises invalid-operand at the instruction. The
// layout knows the stacks (u16, k2), Split cuts them, FormatValues
// leaves them out of the text, and ParseLayouts reads FormatLayouts.
func TestLogStack(t *testing.T) {
	p := compile(t, "name = a\nmodtype = user\noffset = f\npush d,5\nlog 1\nlog ustack\nlog kstack,2\nexit 1\n")
	var m rpn.Machine
	var st rpn.ProbeState
	env := &stackEnv{flatEnv: newFlatEnv(), user: []uint64{0x401000, 0x401234, 0x7f0000001111}, kernel: []uint64{0xffffffff81000001, 0xffffffff81000002, 0xffffffff81000003}}
	r := m.Run(p, 0, &st, nil, nil, env)
	if r.Outcome != rpn.OutcomeExit {
		t.Fatalf("outcome %v %v", r.Outcome, r.Exception)
	}
	want := "0500000000000000" + "0010400000000000" + "3412400000000000" + "11110000007f0000" + strings.Repeat("00", 13*8) +
		"01000081ffffffff" + "02000081ffffffff"
	if got := fmt.Sprintf("%x", r.Log); got != want {
		t.Errorf("log\n %s\nwant\n %s", got, want)
	}
	if got := strings.Join(env.asked, " "); got != "false/16 true/2" {
		t.Errorf("asked %s", got)
	}
	ls := rpn.LogLayouts(p.Module(), 0)
	if got := rpn.FormatLayouts(ls); got != "w8 u16 k2" {
		t.Errorf("layouts %q", got)
	}
	back, err := rpn.ParseLayouts(rpn.FormatLayouts(ls))
	if err != nil || rpn.FormatLayouts(back) != "w8 u16 k2" {
		t.Errorf("ParseLayouts: %v %v", back, err)
	}
	vals, ok := rpn.Split(ls, r.Log)
	if !ok || len(vals) != 3 {
		t.Fatalf("Split: %v %v", vals, ok)
	}
	if got := fmt.Sprint(vals[1].Frames(), vals[2].Frames()); got != "[4198400 4198964 139637976731921] [18446744071578845185 18446744071578845186]" {
		t.Errorf("frames %s", got)
	}
	if got := vals[1].String(); got != "[0x401000 0x401234 0x7f0000001111]" {
		t.Errorf("String %s", got)
	}
	if got := rpn.FormatValues("n=%d", vals); got != "n=5" {
		t.Errorf("FormatValues %q", got)
	}
	if _, ok := rpn.Split(ls, r.Log[:len(r.Log)-8]); ok {
		t.Error("Split took data short of its stacks")
	}
	for _, bad := range []string{"u0", "u65", "kx"} {
		if _, err := rpn.ParseLayouts(bad); err == nil {
			t.Errorf("ParseLayouts(%q) took it", bad)
		}
	}

	for name, e := range map[string]rpn.Env{
		"without StackEnv": newFlatEnv(),
		"refusing":         &stackEnv{flatEnv: newFlatEnv(), refuse: true},
	} {
		r := m.Run(p, 0, &st, nil, nil, e)
		if r.Outcome != rpn.OutcomeException || r.Exception != rpn.ExInvalidOperand || r.PC != 11 {
			t.Errorf("%s: %v %v at pc %d", name, r.Outcome, r.Exception, r.PC)
		}
	}
}

// TestLogStackChecks: N is 1..64, on x86_64 only, in the compiler and
// in the verifier of a PPDF.
func TestLogStackChecks(t *testing.T) {
	for src, msg := range map[string]string{
		"name = a\nmodtype = user\noffset = f\nlog ustack,0\nexit 1\n":            "log ustack frames must be 1..64, not 0",
		"name = a\nmodtype = user\noffset = f\nlog kstack,65\nexit 1\n":           "log kstack frames must be 1..64, not 65",
		"name = a\nmodtype = user\narch = i386\noffset = f\nlog ustack\nexit 1\n": "stacks are unwound on x86_64 only",
	} {
		_, err := compileWith(t, src, nil)
		if err == nil || !strings.Contains(errText(err), msg) {
			t.Errorf("%q: %v, want %q", src, err, msg)
		}
	}
	m, err := compileWith(t, "name = a\nmodtype = user\noffset = f\nlog ustack,64\nlog KSTACK\nexit 1\n", nil)
	if err != nil {
		t.Fatal(errText(err))
	}
	if m.Code[0] != byte(rpn.OpLogUStack) || m.Code[1] != 64 || m.Code[2] != byte(rpn.OpLogKStack) || m.Code[3] != 16 {
		t.Errorf("code % x", m.Code)
	}
	for _, n := range []byte{0, 65} {
		bad := *m
		bad.Code = append([]byte(nil), m.Code...)
		bad.Code[1] = n
		if _, err := rpn.Load(&bad); err == nil || !strings.Contains(err.Error(), "frames outside 1..64") {
			t.Errorf("N %d: %v", n, err)
		}
	}
	bad := *m
	bad.Arch = rpn.ArchI386
	if _, err := rpn.Load(&bad); err == nil || !strings.Contains(err.Error(), "x86_64 only") {
		t.Errorf("i386: %v", err)
	}
}
