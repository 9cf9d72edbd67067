package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const kindsDPDF = "../../rpn/testdata/kinds.dpdf"

// A module with every probe kind builds, byte-identical, and the PPDF
// lists as the DPDF does: each probe's kind, a retprobe's maxactive,
// push field's name.
func TestKindsBuildAndDisasm(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.ppdf"), filepath.Join(dir, "b.ppdf")
	mustRun(t, "build", kindsDPDF, "-o", a)
	mustRun(t, "build", kindsDPDF, "-o", b)
	x, _ := os.ReadFile(a)
	y, _ := os.ReadFile(b)
	if len(x) == 0 || string(x) != string(y) {
		t.Fatal("two builds differ")
	}
	src, built := mustRun(t, "disasm", kindsDPDF), mustRun(t, "disasm", a)
	if src != built {
		t.Errorf("disasm of the PPDF differs from the DPDF's:\n%s\n%s", built, src)
	}
	for _, want := range []string{
		"fields prev_pid next_pid filename pid\n",
		"probe 0: offset = do_sys_open (resolved at insert)  minor=1",
		"probe 1: retprobe = do_sys_open (resolved at insert)  maxactive=128 minor=2",
		"probe 2: retprobe = vfs_read (resolved at insert)  maxactive=64 minor=3",
		"probe 3: tracepoint = sched:sched_switch  minor=4",
		"push field,prev_pid",
		"push field,filename",
	} {
		if !strings.Contains(built, want) {
			t.Errorf("disasm lacks %q:\n%s", want, built)
		}
	}
	// the tracepoints have no address to resolve
	want := kindsDPDF + ": ok: module \"vmlinux\", 6 probes, 51 bytes of bytecode, 3 symbolic values left for insert-time resolution\n"
	if out := mustRun(t, "check", kindsDPDF); out != want {
		t.Errorf("check printed %q, want %q", out, want)
	}
}

// sim runs a tracepoint probe against the fields given with --field, a
// string field through memory; a field not given is an invalid-operand
// exception, as an unknown one is on a target.
func TestSimField(t *testing.T) {
	dir := t.TempDir()
	pp := filepath.Join(dir, "kinds.ppdf")
	mustRun(t, "build", kindsDPDF, "-o", pp)
	for _, file := range []string{kindsDPDF, pp} {
		h := hits(t, simJSON(t, file, "--probe", "3", "--field", "prev_pid=42", "--field", "next_pid=0x1234"))
		if h[0]["outcome"] != "exit" || h[0]["log"] != "2a000000000000003412000000000000" {
			t.Errorf("%s: sched_switch: %v", file, h[0])
		}
		h = hits(t, simJSON(t, file, "--probe", "4", "--field", "filename=0x5000", "--mem", "0x5000=2f62696e2f736800", "--field", "pid=7"))
		if h[0]["outcome"] != "exit" || h[0]["log"] != "2f62696e2f73680700000000000000" {
			t.Errorf("%s: sched_process_exec: %v", file, h[0])
		}
		h = hits(t, simJSON(t, file, "--probe", "3", "--field", "prev_pid=42"))
		if h[0]["outcome"] != "exception" || h[0]["exception"] != "invalid-operand" {
			t.Errorf("%s: without next_pid: %v", file, h[0])
		}
		// a retprobe's program: the return value in rax
		h = hits(t, simJSON(t, file, "--probe", "1", "--reg", "rax=-2"))
		if h[0]["outcome"] != "exit" || h[0]["log"] != "feffffffffffffff" {
			t.Errorf("%s: retprobe: %v", file, h[0])
		}
	}
	out := mustRun(t, "sim", kindsDPDF, "--probe", "3", "--field", "prev_pid=1", "--field", "next_pid=2")
	if !strings.HasPrefix(out, "probe 3: tracepoint = sched:sched_switch (minor 4)\n") {
		t.Errorf("sim's text output:\n%s", out)
	}
	out = mustRun(t, "sim", kindsDPDF, "--probe", "3")
	if !strings.Contains(out, "exception invalid-operand at pc 0x000e (") || !strings.Contains(out, "kinds.dpdf:30:1") {
		t.Errorf("sim without fields:\n%s", out)
	}
	for _, c := range []struct{ arg, want string }{
		{"prev_pid", "--field prev_pid: want NAME=VALUE"},
		{"prev.pid=1", `--field prev.pid=1: "prev.pid" is not a field name`},
		{"prev_pid=x1", "--field prev_pid=x1: "},
	} {
		_, errs, code := gprobes(t, "sim", kindsDPDF, "--probe", "3", "--field", c.arg)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("--field %s: exit %d, %s", c.arg, code, errs)
		}
	}
}

// check reports the probe kinds' mistakes at their file:line:col.
func TestCheckKinds(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "bad.dpdf")
	os.WriteFile(src, []byte("name = ./a.out\nmodtype = user\ntracepoint = sched:sched_switch\nexit\noffset = main\nmaxactive = 2\npush field,pid\nexit 1\nretprobe = main\nopcode = 0x55\nexit\n"), 0o644)
	_, errs, code := gprobes(t, "check", src)
	for _, want := range []string{
		src + `:3:1: a tracepoint probe needs "modtype = kernel"`,
		src + ":6:1: maxactive applies only to a retprobe",
		src + ":7:6: push field reads the event of a tracepoint probe",
		src + ":10:1: opcode does not apply to a retprobe",
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("check lacks %q:\n%s", want, errs)
		}
	}
	if code != 1 {
		t.Errorf("exit %d", code)
	}
}
