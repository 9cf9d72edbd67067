package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// check --target kernel says, before anything is loaded (and as any user,
// on any machine), which probes the kernel target would refuse: what
// eBPF cannot do, and a probe past the kernel verifier's limits, with the
// DPDF line where it goes past and the kernel's figure. Every probe's
// refusal, not only the first.
func TestCheckTargetKernel(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("name = vmlinux\nmodtype = kernel\n")
	b.WriteString("tracepoint = syscalls:sys_enter_getppid\npush u,rdi\nlog 1\nexit 1\n") // probe 0, lines 3-6
	b.WriteString("tracepoint = syscalls:sys_enter_getpid\n")                             // probe 1: 400 diamonds
	for i := 0; i < 400; i++ {
		fmt.Fprintf(&b, "push u,rdi\nshr %d\npush d,1\nand\njz l%d\npush d,%d\nlog 1\nl%d: nop\n", i%64, i, i, i)
	}
	b.WriteString("exit 1\n")
	first := strings.Count(b.String(), "\n") + 1
	b.WriteString("tracepoint = syscalls:sys_enter_gettid\n") // probe 2: past the verifier's budget
	for i := 0; i < 8000; i++ {
		b.WriteString("log 32\n")
	}
	b.WriteString("exit 1\n")
	last := strings.Count(b.String(), "\n")
	b.WriteString("tracepoint = syscalls:sys_enter_getuid\npush d,1\npush d,2\npop mrf\nexit 1\n") // probe 3: eBPF cannot
	src := filepath.Join(dir, "k.dpdf")
	os.WriteFile(src, []byte(b.String()), 0o644)

	out, errs, code := gprobes(t, "check", "--target", "kernel", src)
	if code != 1 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	t.Logf("\n%s%s", out, errs)
	m := regexp.MustCompile(regexp.QuoteMeta(src) + `: kernel target: too large for the kernel: probe 2 pc 0x[0-9a-f]+ at ` + regexp.QuoteMeta(src) + `:(\d+):1: .*may cost the kernel's verifier up to \d+ instructions processed.*\(the kernel's limit: 1000000, `).FindStringSubmatch(errs)
	if m == nil {
		t.Fatalf("no refusal of probe 2 past the verifier's budget in:\n%s", errs)
	}
	if line, _ := strconv.Atoi(m[1]); line <= first || line >= last {
		t.Errorf("probe 2 goes past at line %d, outside its code (%d-%d)", line, first, last)
	}
	if !strings.Contains(errs, src+": kernel target: not compiled for the kernel: probe 3 pc 0x") || !strings.Contains(errs, "pop mrf: eBPF programs cannot write kernel memory") {
		t.Errorf("no refusal of probe 3's pop mrf in:\n%s", errs)
	}
	if strings.Contains(errs, "probe 0") || strings.Contains(errs, "probe 1 ") || strings.Contains(out, "every probe within") {
		t.Errorf("probes 0 and 1 refused, or all said fit:\n%s%s", out, errs)
	}

	// without the last two probes: all fit, the largest named
	os.WriteFile(src, []byte(b.String()[:strings.Index(b.String(), "tracepoint = syscalls:sys_enter_gettid")]), 0o644)
	out, errs, code = gprobes(t, "check", "-t", "kernel", src)
	if code != 0 || !strings.Contains(out, src+": kernel target: every probe within the kernel verifier's limits (the largest, probe 1: ") {
		t.Errorf("exit %d\n%s%s", code, out, errs)
	}

	if _, errs, code = gprobes(t, "check", "--target", "pid:1", src); code != 2 || !strings.Contains(errs, "only the kernel target") {
		t.Errorf("--target pid:1: exit %d, %s", code, errs)
	}
	user := filepath.Join(dir, "u.dpdf")
	os.WriteFile(user, []byte("name = /bin/true\nmodtype = user\noffset = 0x1000\nexit 1\n"), 0o644)
	if _, errs, code = gprobes(t, "check", "--target", "kernel", user); code != 1 || !strings.Contains(errs, "modtype user: the kernel target probes kernel code") {
		t.Errorf("a user module: exit %d, %s", code, errs)
	}
}
