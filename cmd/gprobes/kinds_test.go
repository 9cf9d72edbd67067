package main

import (
	"fmt"
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
		"probe 8: watch = jiffies,8,w (resolved at insert)  minor=9 enabled=no",
		"probe 9: watch = init_task + offsetof(struct task_struct, pid),4,rw (resolved at insert)  minor=10",
		"probe 10: watch = 0xffffffff82000002,2,w  minor=11",
		"   0034  pop iv,0 ",
		"   0039  push iv,0 ",
		"   0047  enable 9 ",
		"   004a  disable 10 ",
	} {
		if !strings.Contains(built, want) {
			t.Errorf("disasm lacks %q:\n%s", want, built)
		}
	}
	// the tracepoints have no address to resolve; the watches of jiffies
	// and of a task's pid do
	want := kindsDPDF + ": ok: module \"vmlinux\", 11 probes, 81 bytes of bytecode, 7 symbolic values left for insert-time resolution\n"
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

// sim of the latency pair (docs/language.md, "Instance variables"): the entry stores push ts in iv 0, the
// return of the same call logs the time taken; --iv presets the call's
// words and the report shows them, on the DPDF and the PPDF.
func TestSimIV(t *testing.T) {
	dir := t.TempDir()
	pp := filepath.Join(dir, "kinds.ppdf")
	mustRun(t, "build", kindsDPDF, "-o", pp)
	for _, file := range []string{kindsDPDF, pp} {
		v := simJSON(t, file, "--probe", "6", "--ts", "1000", "--iv", "7=0x77")
		if h := hits(t, v)[0]; h["outcome"] != "exit" || h["exit"] != 0.0 {
			t.Errorf("%s: entry: %v", file, h)
		}
		if iv := fmt.Sprint(v["iv"]); iv != "[1000 0 0 0 0 0 0 119]" {
			t.Errorf("%s: entry's iv %s", file, iv)
		}
		v = simJSON(t, file, "--probe", "7", "--ts", "1250", "--iv", "0=1000")
		if h := hits(t, v)[0]; h["outcome"] != "exit" || h["log"] != "fa00000000000000" {
			t.Errorf("%s: return: %v", file, h)
		}
		// a probe without iv and without --iv has no "iv"
		if v = simJSON(t, file, "--probe", "0"); v["iv"] != nil {
			t.Errorf("%s: iv %v for a probe that does not use them", file, v["iv"])
		}
	}
	out := mustRun(t, "sim", kindsDPDF, "--probe", "7", "--ts", "1250", "--iv", "0=1000")
	if !strings.Contains(out, "\niv: 1000 0 0 0 0 0 0 0\n") {
		t.Errorf("sim's text output:\n%s", out)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--probe", "6", "--iv", "8=1"}, 1, "sim: --iv 8: instance variables are 0..7"},
		{[]string{"--probe", "6", "--iv", "x"}, 2, "sim: --iv x: want I=V"},
		{[]string{"--probe", "8", "--iv", "0=1"}, 1, "sim: --iv: probe 8 is a watch probe, which runs in no call of a function and so has no instance variables"},
		{[]string{"--probe", "3", "--iv", "0=1"}, 1, "sim: --iv: probe 3 is a tracepoint probe"},
	} {
		_, errs, code := gprobes(t, append([]string{"sim", kindsDPDF}, c.args...)...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, %s", c.args, code, errs)
		}
	}
}

// sim of a watch probe that switches: the switches are listed under the
// hit, a disable of its own minor leaves the later hits not run; a probe
// inserted disabled (enabled = no) runs as if switched on.
func TestSimSwitching(t *testing.T) {
	v := simJSON(t, kindsDPDF, "--probe", "9", "--hits", "3")
	h := hits(t, v)
	if len(h) != 3 || h[0]["outcome"] != "exit" || fmt.Sprint(h[0]["switches"]) != "[enable 9 disable 10]" || h[1]["outcome"] != "off" || h[2]["outcome"] != "off" || h[1]["switches"] != nil {
		t.Errorf("hits %v", h)
	}
	out := mustRun(t, "sim", kindsDPDF, "--probe", "9", "--hits", "2")
	for _, want := range []string{
		"probe 9: watch = init_task + offsetof(struct task_struct, pid),4,rw (minor 10)\n",
		"hit 1: exit 0: nothing committed\n    switched: enable 9, disable 10 (this probe's minor: its later hits do not run); the simulator runs this probe alone, a target switches every probe of the module with the minor\n",
		"hit 2: not run: the probe switched itself off (disable 10 in hit 1)\n",
		"probe switched off: 1 hits, 0 skipped, 1 runs, 0 faults\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("sim's text output lacks %q:\n%s", want, out)
		}
	}
	out = mustRun(t, "sim", kindsDPDF, "--probe", "8", "--reg", "rip=0x401005")
	if !strings.HasPrefix(out, "probe 8: watch = jiffies,8,w (minor 9; enabled = no, simulated as switched on)\nhit 1: exit 1 (log stream), record major 0 minor 9, 8 bytes\n    00000000  05 10 40 00") {
		t.Errorf("sim of a disabled watch probe:\n%s", out)
	}
}

// check reports watch, switching and iv mistakes at their file:line:col.
func TestCheckWatchAndSwitching(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "bad.dpdf")
	os.WriteFile(src, []byte("name = ./a.out\nmodtype = user\nwatch = 0x1002,4,w\nlogonfault = yes\npush iv,0\nexit\noffset = main\nminor = 1\nenabled = maybe\ndisable 2\npush iv,8\nexit 1\n"), 0o644)
	_, errs, code := gprobes(t, "check", src)
	for _, want := range []string{
		src + ":3:9: watch address 0x1002 is not a multiple of its length 4",
		src + ":4:1: logonfault = yes does not apply to a watch probe",
		src + ":5:6: push iv: instance variables belong to a call of a function, and a watch probe runs in none",
		src + `:9:11: enabled must be "yes" or "no", not maybe`,
		src + ":10:9: disable 2: no probe in this file has minor 2 (the minors here: 0, 1)",
		src + ":11:9: iv index must be 0..7, not 8",
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("check lacks %q:\n%s", want, errs)
		}
	}
	if code != 1 {
		t.Errorf("exit %d", code)
	}
}
