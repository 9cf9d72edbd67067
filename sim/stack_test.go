package sim_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/sim"
)

// log ustack off-line, against a core gdb's gcore wrote of
// testdata/stacks/fact.c (gcc -O2, no frame pointers) stopped at leaf:
// the stack is unwound from the core's registers and stack with the CFI of
// the files its NT_FILE note names, and named from them: leaf, fact x4,
// run, main, libc's start, _start. log kstack is invalid-operand.
func TestSimStack(t *testing.T) {
	testkit.Need(t, "gdb")
	prog := testkit.CC(t, "fact-O2", "-O2", "../testdata/stacks/fact.c")
	core := filepath.Join(t.TempDir(), "core")
	if out, err := exec.Command("gdb", "-nx", "-batch", "-ex", "set debuginfod enabled off", "-ex", "break leaf", "-ex", "run",
		"-ex", "gcore "+core, "-ex", "kill", "--args", prog, "3", "1").CombinedOutput(); err != nil {
		t.Fatalf("gdb: %v\n%s", err, out)
	}
	src := "name = " + prog + "\nmodtype = user\noffset = leaf\nlog ustack\nexit 1\noffset = leaf\nlog kstack\nexit 1\n" +
		"offset = leaf\nautostacktrace = yes\npush d,0\npush mrf,8\nlog 1\nexit 1\n"
	f, err := dpdf.ParseSource("s.dpdf", []byte(src), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		t.Fatal(err)
	}
	m, err := compiler.Compile(f, rpn.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := rpn.Load(m)
	if err != nil {
		t.Fatal(err)
	}
	env := sim.NewEnv()
	if err := env.LoadCore(core); err != nil {
		t.Fatal(err)
	}
	rep, err := sim.Run(p, env, sim.Options{Probe: 0, Hits: 1})
	if err != nil {
		t.Fatal(err)
	}
	h := rep.Hits[0]
	if len(h.Stacks) != 1 {
		t.Fatalf("hit %+v: want one stack", h)
	}
	var names []string
	for _, fr := range h.Stacks[0].Frames {
		names = append(names, fr.Function)
	}
	want := "leaf fact fact fact fact run main"
	if len(names) < 9 || strings.Join(names[:7], " ") != want || names[len(names)-1] != "_start" {
		t.Errorf("frames %v, want %s, libc's, _start", h.Stacks[0].Frames, want)
	}
	for i, fr := range h.Stacks[0].Frames[:7] {
		if fr.Module != prog || i > 0 && fr.Offset == 0 {
			t.Errorf("frame %d %v", i, fr)
		}
	}
	var b strings.Builder
	rep.WriteText(&b)
	if !strings.Contains(b.String(), "    ustack:\n      leaf+0x0 ("+prog+")\n      fact+0x") {
		t.Errorf("text:\n%s", b.String())
	}
	rep, err = sim.Run(p, env, sim.Options{Probe: 1, Hits: 1})
	if err != nil || rep.Hits[0].Exception != "invalid-operand" {
		t.Errorf("log kstack: %+v %v, want invalid-operand", rep.Hits, err)
	}
	// autostacktrace = yes: the invalid-address exception carries the
	// stack, printed under it
	rep, err = sim.Run(p, env, sim.Options{Probe: 2, Hits: 1})
	if err != nil || rep.Hits[0].Exception != "invalid-address" || len(rep.Hits[0].Stacks) != 1 {
		t.Fatalf("autostacktrace: %+v %v, want invalid-address with a stack", rep.Hits, err)
	}
	names = nil
	for _, fr := range rep.Hits[0].Stacks[0].Frames {
		names = append(names, fr.Function)
	}
	if len(names) < 9 || strings.Join(names[:7], " ") != want || names[len(names)-1] != "_start" {
		t.Errorf("autostacktrace: frames %v, want %s, libc's, _start", names, want)
	}
	b.Reset()
	rep.WriteText(&b)
	if !strings.Contains(b.String(), "nothing committed\n    ustack:\n      leaf+0x0 ("+prog+")\n      fact+0x") {
		t.Errorf("autostacktrace: text:\n%s", b.String())
	}
}
