package targets

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in, canon string
		guest     bool
	}{
		{"pid:42", "pid:42", false},
		{"pid:0042", "pid:42", false},
		{"exec:/bin/ls -l /", "exec:/bin/ls -l /", false},
		{"exec:  ls  ", "exec:ls", false},
		{"gdb:127.0.0.1:1234", "gdb:127.0.0.1:1234", true},
		{"gdb:tcp:localhost:1", "gdb:tcp:localhost:1", true},
		{"gdb:unix:/run/stub.sock", "gdb:unix:/run/stub.sock", true},
		{"gdb:/run/stub.sock", "gdb:/run/stub.sock", true},
		{"xen:3", "xen:3", true},
		{"kernel", "kernel", false},
		{"host", "host", false},
	} {
		s, err := Parse(c.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.in, err)
			continue
		}
		if s.String() != c.canon || s.Guest() != c.guest {
			t.Errorf("Parse(%q) = %s guest %v, want %s %v", c.in, s, s.Guest(), c.canon, c.guest)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "want pid:N"},
		{"42", "want pid:N"},
		{"pid:", "pid:N with N a process id"},
		{"pid:-1", "pid:N with N a process id"},
		{"pid:x", "pid:N with N a process id"},
		{"exec:", "exec:PATH"},
		{"gdb:", "gdb:HOST:PORT"},
		{"gdb:host", "gdb:HOST:PORT"},
		{"gdb:host:99999", "PORT a TCP port"},
		{"gdb:unix:", "gdb:unix:PATH"},
		{"xen:0", "xen:DOMID"},
		{"xen:32752", "xen:DOMID"},
		{"kvm:1", "want pid:N"},
		{"host:1", "host takes nothing after it"},
		{"hosts", "want pid:N"},
		{"pid:" + strings.Repeat("9", 1000), "pid:N"},
	} {
		_, err := Parse(c.in)
		if err == nil || !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%.20q): %v, want an ErrSpec saying %q", c.in, err, c.want)
			continue
		}
		if len(err.Error()) > 200 {
			t.Errorf("Parse(%.20q): a %d-byte message quotes the whole spec", c.in, len(err.Error()))
		}
	}
}

func TestExecNotInPath(t *testing.T) {
	s, err := Parse("exec:no-such-program-gprobes")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(Options{}); err == nil || !strings.Contains(err.Error(), "no-such-program-gprobes") {
		t.Errorf("Open: %v", err)
	}
}
