package rpn_test

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/rpn"
)

func compileFile(t *testing.T, path string, opts rpn.CompileOptions) *rpn.Module {
	t.Helper()
	f, err := dpdf.Parse(path, dpdf.Options{NoPreprocessor: true})
	if err == nil {
		var m *rpn.Module
		if m, err = compiler.Compile(f, opts); err == nil {
			return m
		}
	}
	t.Fatalf("%s: %s", path, errText(err))
	return nil
}

// TestProbeKinds: testdata/kinds.dpdf, one probe of every kind, compiles
// to the kinds, locations, limits and field table its keywords say,
// verifies, and disassembles as testdata/kinds.disasm (-update rewrites
// it).
func TestProbeKinds(t *testing.T) {
	m := compileFile(t, "testdata/kinds.dpdf", rpn.CompileOptions{})
	type want struct {
		kind      rpn.ProbeKind
		maxActive uint32
		limit     uint32
		loc       rpn.LocKind
		text      string
	}
	wants := []want{
		{rpn.ProbeOffset, 0, 64, rpn.LocExpr, "do_sys_open"},
		{rpn.ProbeRetprobe, 128, 128, rpn.LocExpr, "do_sys_open"},
		{rpn.ProbeRetprobe, 0, rpn.DefaultMaxActive, rpn.LocExpr, "vfs_read"},
		{rpn.ProbeTracepoint, 0, 64, rpn.LocTracepoint, "sched:sched_switch"},
		{rpn.ProbeTracepoint, 0, 64, rpn.LocTracepoint, "sched:sched_process_exec"},
		{rpn.ProbeTracepoint, 0, 64, rpn.LocTracepoint, "sched:sched_process_exit"},
		{rpn.ProbeOffset, 0, 64, rpn.LocExpr, "do_sys_open"},
		{rpn.ProbeRetprobe, 0, 64, rpn.LocExpr, "do_sys_open"},
		{rpn.ProbeWatch, 0, 64, rpn.LocExpr, "jiffies"},
		{rpn.ProbeWatch, 0, 64, rpn.LocExpr, "init_task + offsetof(struct task_struct, pid)"},
		{rpn.ProbeWatch, 0, 64, rpn.LocAbsolute, "0xffffffff82000002"},
	}
	if len(m.Probes) != len(wants) {
		t.Fatalf("%d probes, want %d", len(m.Probes), len(wants))
	}
	for i, w := range wants {
		p := &m.Probes[i]
		got := want{p.Kind, p.MaxActive, p.ActiveLimit(), p.Loc.Kind, p.Loc.Text}
		if got != w {
			t.Errorf("probe %d: %+v, want %+v", i, got, w)
		}
		if p.Minor != uint16(i+1) {
			t.Errorf("probe %d: minor %d", i, p.Minor)
		}
		if w.loc == rpn.LocTracepoint {
			if sub, ev, ok := rpn.SplitTracepoint(p.Loc.Text); !ok || sub+":"+ev != w.text {
				t.Errorf("probe %d: SplitTracepoint(%q) = %q, %q, %v", i, p.Loc.Text, sub, ev, ok)
			}
			if p.Loc.Resolved || p.Loc.Addr != 0 || len(p.Loc.Sum.Terms) != 0 {
				t.Errorf("probe %d: a tracepoint location with an address: %+v", i, p.Loc)
			}
		}
	}
	// watch probes' lengths and modes, the others' zero; enabled = no
	for i, w := range []struct {
		n       uint8
		mode    rpn.WatchMode
		disable bool
	}{8: {8, rpn.WatchWrite, true}, 9: {4, rpn.WatchReadWrite, false}, 10: {2, rpn.WatchWrite, false}} {
		if p := &m.Probes[i]; p.WatchLen != w.n || p.WatchMode != w.mode || p.Disabled != w.disable {
			t.Errorf("probe %d: watch %d %s disabled %v, want %+v", i, p.WatchLen, p.WatchMode, p.Disabled, w)
		}
	}
	// pid, used by two probes, is in the table once
	if want := []string{"prev_pid", "next_pid", "filename", "pid"}; !reflect.DeepEqual(m.Fields, want) {
		t.Errorf("Fields = %q, want %q", m.Fields, want)
	}
	if _, err := rpn.Load(m); err != nil {
		t.Fatalf("%+v", err)
	}
	var b strings.Builder
	rpn.Disasm(&b, m)
	golden := "testdata/kinds.disasm"
	if *update {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	wantText, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if b.String() != string(wantText) {
		t.Errorf("disassembly differs from %s:\n--- got\n%s--- want\n%s", golden, b.String(), wantText)
	}
}

// TestRetprobeLocation: a retprobe's location is an offset's symbolic
// expression, resolved the same way: with symbols at build time its
// address is the function's.
func TestRetprobeLocation(t *testing.T) {
	src := "name = vmlinux\nmodtype = kernel\noffset = do_sys_open\nexit 0\nretprobe = do_sys_open\nexit 0\nretprobe = 0xffffffff81000000\nexit 0\n"
	syms := layouts{"do_sys_open": 0xffffffff812a3b40}
	for _, r := range []rpn.Resolver{nil, syms} {
		m, err := compileWith(t, src, r)
		if err != nil {
			t.Fatal(errText(err))
		}
		off, ret := m.Probes[0].Loc, m.Probes[1].Loc
		if !reflect.DeepEqual(off, ret) {
			t.Errorf("symbols %v: retprobe location %+v, offset's %+v", r != nil, ret, off)
		}
		if r != nil && (!ret.Resolved || ret.Addr != 0xffffffff812a3b40) {
			t.Errorf("resolved retprobe location %+v", ret)
		}
		if abs := m.Probes[2].Loc; abs.Kind != rpn.LocAbsolute || abs.Addr != 0xffffffff81000000 {
			t.Errorf("absolute retprobe location %+v", abs)
		}
		if m.Probes[1].Kind != rpn.ProbeRetprobe || m.Probes[1].ActiveLimit() != rpn.DefaultMaxActive {
			t.Errorf("probe 1: %+v", m.Probes[1])
		}
	}
	// user code has return probes too (the targets run them later)
	if _, err := compileWith(t, "name = ./a.out\nmodtype = user\nretprobe = main\nmaxactive = 4096\nexit 0\n", nil); err != nil {
		t.Error(errText(err))
	}
}

// TestPushFieldNames: field names keep their case (the kernel's are
// case-sensitive), the mnemonic's does not matter, and each name is in
// the table once, in order of first use, the operand its index.
func TestPushFieldNames(t *testing.T) {
	src := `name = vmlinux
modtype = kernel
tracepoint = syscalls:sys_enter_openat
push field,Flags
PUSH FIELD,flags
Push Field , Flags
push field,_x9
log 3
exit 1
tracepoint = Sub_1:EV_2
push field,flags
log 1
exit 1
`
	m, err := compileWith(t, src, nil)
	if err != nil {
		t.Fatal(errText(err))
	}
	if want := []string{"Flags", "flags", "_x9"}; !reflect.DeepEqual(m.Fields, want) {
		t.Errorf("Fields = %q, want %q", m.Fields, want)
	}
	if m.Probes[1].Loc.Text != "Sub_1:EV_2" {
		t.Errorf("tracepoint text %q: the case is the kernel's", m.Probes[1].Loc.Text)
	}
	p, err := rpn.Load(m)
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for i := p.Entry(0); i < p.End(0); i++ {
		if in := p.Insn(i); in.Op == rpn.OpPushField {
			ops = append(ops, fmt.Sprint(in.B))
		}
	}
	if got := strings.Join(ops, " "); got != "0 1 0 2" {
		t.Errorf("push field operands %s, want 0 1 0 2", got)
	}
}

// TestTooManyFields: the 65536th distinct field name of a module is
// refused where it is written.
func TestTooManyFields(t *testing.T) {
	var b strings.Builder
	b.WriteString("name = vmlinux\nmodtype = kernel\ntracepoint = a:b\n")
	for i := 0; i <= rpn.MaxFields; i++ {
		fmt.Fprintf(&b, "push field,f%d\npop\n", i)
	}
	b.WriteString("exit 1\n")
	_, err := compileWith(t, b.String(), nil)
	line := 4 + 2*rpn.MaxFields
	want := fmt.Sprintf("sum.dpdf:%d:12: more than 65535 distinct field names in one module", line)
	if err == nil || !strings.HasPrefix(errText(err), want+"\n") {
		t.Errorf("got %v, want %q", err, want)
	}
}

// fieldEnv is flatEnv with tracepoint fields.
type fieldEnv struct {
	*flatEnv
}

func (fieldEnv) Field(name string) (uint64, bool) {
	switch name {
	case "prev_pid":
		return 42, true
	case "next_pid":
		return 43, true
	}
	return 0, false
}

// TestPushFieldEnv: push field asks the Env through rpn.FieldEnv; an Env
// without it raises invalid-operand, and a hit reading fields allocates
// nothing.
func TestPushFieldEnv(t *testing.T) {
	p := compile(t, "name = vmlinux\nmodtype = kernel\ntracepoint = sched:sched_switch\npush field,prev_pid\npush field,next_pid\nlog 2\nexit 1\n")
	var m rpn.Machine
	var st rpn.ProbeState
	r := m.Run(p, 0, &st, nil, nil, newFlatEnv())
	if r.Outcome != rpn.OutcomeException || r.Exception != rpn.ExInvalidOperand || r.PC != 0 {
		t.Errorf("an Env without fields: %v %v at pc %d", r.Outcome, r.Exception, r.PC)
	}
	env := fieldEnv{newFlatEnv()}
	r = m.Run(p, 0, &st, nil, nil, env)
	if r.Outcome != rpn.OutcomeExit || fmt.Sprintf("%x", r.Log) != "2a000000000000002b00000000000000" {
		t.Errorf("with fields: %v %v log %x", r.Outcome, r.Exception, r.Log)
	}
	if allocs := testing.AllocsPerRun(1000, func() { m.Run(p, 0, &st, nil, nil, env) }); allocs != 0 {
		t.Errorf("%v allocations per hit", allocs)
	}
}
