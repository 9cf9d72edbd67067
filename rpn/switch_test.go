package rpn_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/rpn"
)

// TestWatchLocation: a watch's address is an offset's expression,
// resolved the same way (with symbols at build time, the sum's value);
// the location's text is the address alone, the length and mode apart.
func TestWatchLocation(t *testing.T) {
	src := "name = vmlinux\nmodtype = kernel\noffset = jiffies + offsetof(struct req, flags)\nexit 0\nwatch = jiffies + offsetof(struct req, flags) , 4 , w\nexit 0\n"
	for _, r := range []rpn.Resolver{nil, testLayouts} {
		m, err := compileWith(t, src, r)
		if err != nil {
			t.Fatal(errText(err))
		}
		off, w := m.Probes[0].Loc, m.Probes[1].Loc
		if !reflect.DeepEqual(off, w) {
			t.Errorf("symbols %v: watch location %+v, offset's %+v", r != nil, w, off)
		}
		if r != nil && (!w.Resolved || w.Addr != 0xffffffff82a05000+0x1c) {
			t.Errorf("resolved watch location %+v", w)
		}
		if p := m.Probes[1]; p.Kind != rpn.ProbeWatch || p.WatchLen != 4 || p.WatchMode != rpn.WatchWrite || p.Disabled {
			t.Errorf("probe 1: %+v", p)
		}
	}
	// a constant address, aligned, on i386 too; a symbolic one is not
	// checked for alignment before insert
	for _, src := range []string{
		"name = a\nmodtype = user\nwatch = 0x1000 + 6,2,RW\nexit\n",
		"name = a\nmodtype = user\narch = i386\nwatch = 0x1004,4,w\nexit\n",
		"name = a\nmodtype = user\nwatch = counter + 1,8,w\nexit\n",
	} {
		if _, err := compileWith(t, src, nil); err != nil {
			t.Errorf("%q: %s", src, errText(err))
		}
	}
}

// TestSwitchMinors: enable and disable may name any minor of the file's
// probes, their own included; a minor of none is an error, unless a
// probe's minor failed to compile (the check would mislead).
func TestSwitchMinors(t *testing.T) {
	ok := "name = a\nmodtype = user\noffset = f\nminor = 65535\nenable 0\ndisable 65535\nexit\noffset = g\nexit\n"
	m, err := compileWith(t, ok, nil)
	if err != nil {
		t.Fatal(errText(err))
	}
	p, err := rpn.Load(m)
	if err != nil {
		t.Fatal(err)
	}
	if in := p.Insn(0); in.Op != rpn.OpEnable || in.B != 0 {
		t.Errorf("insn 0: %+v", in)
	}
	if in := p.Insn(1); in.Op != rpn.OpDisable || in.B != 65535 {
		t.Errorf("insn 1: %+v", in)
	}
	_, err = compileWith(t, "name = a\nmodtype = user\noffset = f\nminor = x\nenable 9\nexit\n", nil)
	if got := errText(err); !strings.Contains(got, "minor must be a constant") || strings.Contains(got, "enable 9") {
		t.Errorf("a bad minor and enable 9: %s", got)
	}
	// the minors listed are the file's, at most 8 of them
	var b strings.Builder
	b.WriteString("name = a\nmodtype = user\n")
	for i := 1; i <= 10; i++ {
		fmt.Fprintf(&b, "offset = f\nminor = %d\nexit\n", i*10)
	}
	b.WriteString("offset = g\nminor = 5\nenable 11\nexit\n")
	_, err = compileWith(t, b.String(), nil)
	if want := "sum.dpdf:35:8: enable 11: no probe in this file has minor 11 (the minors here: 5, 10, 20, 30, 40, 50, 60, 70, ...)"; !strings.Contains(errText(err), want) {
		t.Errorf("got %s, want %s", errText(err), want)
	}
}

// switchEnv is flatEnv with a Switcher and instance variables.
type switchEnv struct {
	*flatEnv
	switched []string
	refuse   bool
	iv       *[rpn.MaxIV]uint64
}

func (e *switchEnv) Switch(minor uint16, on bool) bool {
	if e.refuse {
		return false
	}
	w := "disable"
	if on {
		w = "enable"
	}
	e.switched = append(e.switched, fmt.Sprintf("%s %d", w, minor))
	return true
}

func (e *switchEnv) IV() *[rpn.MaxIV]uint64 { return e.iv }

// ivOnly has instance variables and no Switcher.
type ivOnly struct {
	*flatEnv
	iv *[rpn.MaxIV]uint64
}

func (e ivOnly) IV() *[rpn.MaxIV]uint64 { return e.iv }

// TestSwitchEnv: enable and disable ask the Env's Switcher in program
// order, and are made even when the hit ends in an exception later; an
// Env without a Switcher, or one that refuses, raises invalid-operand at
// the instruction.
func TestSwitchEnv(t *testing.T) {
	p := compile(t, "name = a\nmodtype = user\noffset = f\nminor = 3\nenable 4\ndisable 3\nenable 3\npush d,1\npush d,0\ndiv\nexit 1\noffset = g\nminor = 4\nexit\n")
	var m rpn.Machine
	var st rpn.ProbeState
	env := &switchEnv{flatEnv: newFlatEnv()}
	r := m.Run(p, 0, &st, nil, nil, env)
	if r.Outcome != rpn.OutcomeException || r.Exception != rpn.ExDivideByZero {
		t.Errorf("outcome %v %v", r.Outcome, r.Exception)
	}
	if got := strings.Join(env.switched, ", "); got != "enable 4, disable 3, enable 3" {
		t.Errorf("switched %s", got)
	}
	for name, e := range map[string]rpn.Env{
		"without a Switcher": newFlatEnv(),
		"with IVEnv only":    ivOnly{flatEnv: newFlatEnv()},
		"refusing":           &switchEnv{flatEnv: newFlatEnv(), refuse: true},
	} {
		r := m.Run(p, 0, &st, nil, nil, e)
		if r.Outcome != rpn.OutcomeException || r.Exception != rpn.ExInvalidOperand || r.PC != 0 || r.Minor != 3 {
			t.Errorf("%s: %v %v at pc %d minor %d", name, r.Outcome, r.Exception, r.PC, r.Minor)
		}
	}
	if st.Disabled {
		t.Error("a switch changed the machine's own state (max hits, rem)")
	}
}

// TestIVEnv: push iv and pop iv read and write the call's words in place;
// without IVEnv, or with a nil IV, the hit has zeroed words of its own,
// which the next hit does not see; on i386 a word keeps its 32 bits.
func TestIVEnv(t *testing.T) {
	p := compile(t, "name = a\nmodtype = user\nvars = 1\noffset = f\npush iv,7\npush iv,0\nlog 2\npush d,0x55\npop iv,7\npush iv,7\ninc lv,0\npush lv,0\npop iv,0\nlog 1\nexit 1\n")
	var m rpn.Machine
	var st rpn.ProbeState
	var call [rpn.MaxIV]uint64
	call[7], call[0] = 9, 0xffffffffffffffff
	lv := make([]uint64, 1)
	for _, env := range []rpn.Env{&switchEnv{flatEnv: newFlatEnv(), iv: &call}, ivOnly{flatEnv: newFlatEnv(), iv: &call}} {
		call[7], call[0], lv[0] = 9, 0xffffffffffffffff, 0
		r := m.Run(p, 0, &st, lv, nil, env)
		if got := fmt.Sprintf("%x", r.Log); r.Outcome != rpn.OutcomeExit || got != "0900000000000000ffffffffffffffff5500000000000000" {
			t.Errorf("with the call's words: %v log %s", r.Outcome, got)
		}
		if call[7] != 0x55 || call[0] != 1 {
			t.Errorf("the call's words after the hit: %v", call)
		}
	}
	for name, env := range map[string]rpn.Env{"without IVEnv": newFlatEnv(), "with a nil IV": &switchEnv{flatEnv: newFlatEnv()}} {
		for hit := 1; hit <= 2; hit++ {
			r := m.Run(p, 0, &st, lv, nil, env)
			if got := fmt.Sprintf("%x", r.Log); r.Outcome != rpn.OutcomeExit || got != "000000000000000000000000000000005500000000000000" {
				t.Errorf("%s, hit %d: %v log %s", name, hit, r.Outcome, got)
			}
		}
	}
	env := &switchEnv{flatEnv: newFlatEnv(), iv: &call}
	if allocs := testing.AllocsPerRun(1000, func() { m.Run(p, 0, &st, lv, nil, env) }); allocs != 0 {
		t.Errorf("%v allocations per hit", allocs)
	}
	p32 := compile(t, "name = a\nmodtype = user\narch = i386\noffset = f\npush iv,1\nlog 1\nexit 1\n")
	call[1] = 0x100000002
	if r := m.Run(p32, 0, &st, nil, nil, env); fmt.Sprintf("%x", r.Log) != "02000000" {
		t.Errorf("i386: log %x", r.Log)
	}
}

// TestSwitchStates: the probes of one minor share a switch, so they must
// start in one state; the compiler says where, the verifier refuses a
// PPDF that mixes them.
func TestSwitchStates(t *testing.T) {
	ok := "name = a\nmodtype = user\noffset = f\nminor = 1\nenabled = no\nexit\noffset = g\nminor = 1\nenabled = NO\nexit\noffset = h\nexit\n"
	if _, err := compileWith(t, ok, nil); err != nil {
		t.Fatal(errText(err))
	}
	bad := "name = a\nmodtype = user\noffset = f\nexit\noffset = g\nenabled = no\nexit\n"
	_, err := compileWith(t, bad, nil)
	if want := "sum.dpdf:6:1: probes of minor 0 differ in enabled (line 3): a switch belongs to a minor"; !strings.Contains(errText(err), want) {
		t.Errorf("got %s, want %s", errText(err), want)
	}
	m, err := compileWith(t, ok, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.Probes[1].Disabled = false
	if _, err := rpn.Load(m); err == nil || !strings.Contains(err.Error(), "probes 0 and 1 of minor 1 differ in enabled") {
		t.Errorf("Load of mixed states: %v", err)
	}
}
