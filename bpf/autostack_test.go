package bpf_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/rpn"
)

// autostacktrace = yes with a logmax below one frame (8 bytes) is
// refused: the exception record would carry no stack. With logmax 8 it
// compiles.
func TestAutoStackLogmax(t *testing.T) {
	for _, c := range []struct {
		logmax string
		ok     bool
	}{{"7", false}, {"8", true}} {
		src := "name = vmlinux\nmodtype = kernel\nlogmax = " + c.logmax + "\nautostacktrace = yes\ntracepoint = syscalls:sys_enter_getppid\npush d,0\npush mrf,8\nlog 1\nexit 1\n"
		f, err := dpdf.ParseSource("a.dpdf", []byte(src), dpdf.Options{NoPreprocessor: true})
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
		_, err = bpf.Compile(p, 0, bpf.Options{Kind: bpf.KindTracepoint})
		var u *bpf.Unsupported
		switch {
		case c.ok && err != nil:
			t.Errorf("logmax %s: %v", c.logmax, err)
		case !c.ok && (!errors.As(err, &u) || !strings.Contains(err.Error(), "autostacktrace = yes: logmax 7 holds no frame")):
			t.Errorf("logmax %s: %v, want the refusal", c.logmax, err)
		}
	}
}
