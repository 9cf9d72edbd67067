package rpn_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/rpn"
)

// autostacktrace = yes in the header is every probe's default, a probe's
// own keyword overrides it (before the first probe the keyword is the
// header's, after it the probe's); the disassembly shows it. Dynamic
// Probes' log_st is log ustack (16 frames) in a user module and log
// kstack in a kernel module: the same code.
func TestAutoStackKeyword(t *testing.T) {
	p := compile(t, `name = a
modtype = user
autostacktrace = yes
offset = f
minor = 1
exit 1
offset = g
minor = 2
autostacktrace = no
exit 1
`)
	m := p.Module()
	if !m.Probes[0].AutoStack || m.Probes[1].AutoStack {
		t.Errorf("autostacktrace %v %v, want the header's yes, then the probe's no", m.Probes[0].AutoStack, m.Probes[1].AutoStack)
	}
	var dis strings.Builder
	rpn.Disasm(&dis, m)
	if got := strings.Count(dis.String(), " autostacktrace=yes"); got != 1 {
		t.Errorf("autostacktrace=yes %d times in the disassembly, want once:\n%s", got, dis.String())
	}
	p = compile(t, "name = a\nmodtype = user\noffset = f\nautostacktrace = yes\nexit 1\noffset = g\nexit 1\n")
	if m := p.Module(); !m.Probes[0].AutoStack || m.Probes[1].AutoStack {
		t.Errorf("a probe's own autostacktrace: %v %v, want yes then no", m.Probes[0].AutoStack, m.Probes[1].AutoStack)
	}

	for _, c := range []struct{ modtype, stack string }{{"user", "ustack"}, {"kernel", "kstack"}} {
		st := compile(t, "name = a\nmodtype = "+c.modtype+"\noffset = f\nlog_st\nexit 1\n").Module()
		want := compile(t, "name = a\nmodtype = "+c.modtype+"\noffset = f\nlog "+c.stack+"\nexit 1\n").Module()
		if !bytes.Equal(st.Code, want.Code) {
			t.Errorf("%s module: log_st compiles to %x, log %s to %x", c.modtype, st.Code, c.stack, want.Code)
		}
		op := rpn.OpLogUStack
		if c.stack == "kstack" {
			op = rpn.OpLogKStack
		}
		if len(st.Code) < 2 || st.Code[0] != byte(op) || st.Code[1] != rpn.DefaultStackFrames {
			t.Errorf("%s module: log_st compiles to %x, want %s,%d", c.modtype, st.Code, op, rpn.DefaultStackFrames)
		}
	}
}
