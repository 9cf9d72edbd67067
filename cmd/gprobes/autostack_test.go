package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gprobes check names the probes with autostacktrace = yes and the stack
// their exception records carry (user in a user module, kernel in a
// kernel module); a PPDF built from the DPDF carries the flag, which
// check and disasm show.
func TestCheckAutoStack(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "a.dpdf")
	os.WriteFile(src, []byte(`name = /bin/true
modtype = user
autostacktrace = yes
offset = 0x1000
minor = 1
push d,0
push mrf,8
exit 1
offset = 0x1010
minor = 2
autostacktrace = no
log_st
exit 1
`), 0o644)
	const want = "autostacktrace: the exception records of 0x1000 (minor 1) carry the user stack at the hit (16 frames at most)"
	out := mustRun(t, "check", src)
	if !strings.Contains(out, src+": "+want+"\n") || strings.Contains(out, "minor 2") {
		t.Errorf("check:\n%s\nwant the line %q, and no minor 2", out, want)
	}
	pack := filepath.Join(dir, "a.ppdf")
	mustRun(t, "build", src, "-o", pack)
	if out := mustRun(t, "check", pack); !strings.Contains(out, pack+": "+want+"\n") {
		t.Errorf("check of the PPDF:\n%s\nwant %q", out, want)
	}
	dis := mustRun(t, "disasm", pack)
	if strings.Count(dis, "autostacktrace=yes") != 1 || !strings.Contains(dis, "log ustack,16") {
		t.Errorf("disasm: want one probe with autostacktrace=yes and log_st as log ustack,16:\n%s", dis)
	}
	kern := filepath.Join(dir, "k.dpdf")
	os.WriteFile(kern, []byte("name = vmlinux\nmodtype = kernel\noffset = 0xffffffff81000000\nautostacktrace = yes\nexit 1\n"), 0o644)
	if out := mustRun(t, "check", kern); !strings.Contains(out, "carry the kernel stack at the hit") {
		t.Errorf("check of a kernel module:\n%s", out)
	}
}
