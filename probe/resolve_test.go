package probe_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
)

// table answers a sum's terms, source lines and build IDs from a map:
// what the compiler saw at build time, or what a target knows at insert.
type table map[string]uint64

func (l table) get(k string) (uint64, error) {
	if v, ok := l[k]; ok {
		return v, nil
	}
	return 0, fmt.Errorf("%s is not known", k)
}
func (l table) Symbol(name string) (uint64, error) { return l.get(name) }
func (l table) Sizeof(typ string) (uint64, error)  { return l.get("sizeof " + typ) }
func (l table) Offsetof(typ, field string) (uint64, error) {
	return l.get("offsetof " + typ + " " + field)
}
func (l table) LineAddr(file string, line int) (uint64, int, error) {
	v, err := l.get(fmt.Sprintf("%s:%d", file, line))
	return v, line, err
}
func (l table) line(file string, line int) (uint64, error) {
	v, _, err := l.LineAddr(file, line)
	return v, err
}
func (l table) BuildID() []byte { return nil }

// the link-time symbols and types a module was built against
var built = table{
	"f": 0x401000, "g": 0x402000, "jiffies": 0x404000,
	"sizeof struct req": 0x58, "offsetof struct req flags": 0x1c,
	"prog.c:6": 0x401010,
}

const src = `name = prog
modtype = user
offset = f+4
push d,jiffies
push d,sizeof(struct req)
push d,g-f
log 3
exit
offset = prog.c:6
push d,offsetof(struct req, flags)
log 1
exit
offset = g
exit
offset = 0x1000
exit
`

func compile(t *testing.T, r rpn.Resolver) *rpn.Module {
	t.Helper()
	f, err := dpdf.ParseSource("prog.dpdf", []byte(src), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		t.Fatal(err)
	}
	var opts rpn.CompileOptions
	if r != nil {
		opts.Symbols = r
	}
	m, err := compiler.Compile(f, opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// immediates are the values a relocated module's push d, hold, in order.
func immediates(m *rpn.Module, prog *rpn.Program) []uint64 {
	var out []uint64
	for _, r := range m.Relocs {
		out = append(out, binary.LittleEndian.Uint64(prog.Module().Code[r.Off:]))
	}
	return out
}

const bias = 0x5555_5555_0000

// TestResolver: locations and relocations resolve where the module runs
// from what the target knows, moved by the bias for a target that knows
// link-time addresses (a file's symbols) and not for one that knows
// run-time ones (the running kernel's kallsyms); and, where the target
// knows nothing, from the values of build time, moved the same way (a
// symbol by the bias or slide, a type layout not at all). A value that
// needs moving while the slide is unknown is refused, its probe alone,
// naming both reasons.
func TestResolver(t *testing.T) {
	withSyms, without := compile(t, built), compile(t, nil)
	// what each probe's location and each push d, is where the module
	// runs at bias
	wantLoc := []uint64{0x401004 + bias, 0x401010 + bias, 0x402000 + bias, 0x1000 + bias}
	wantImm := []uint64{0x404000 + bias, 0x58, 0x1000, 0x1c}
	live := table{}
	for k, v := range built {
		live[k] = v
	}
	for k := range built {
		if !strings.Contains(k, " ") && !strings.Contains(k, ":") {
			live[k] += bias // kallsyms: run-time addresses
		}
	}
	slideErr := errors.New("the slide is unknown")
	cases := []struct {
		name string
		m    *rpn.Module
		r    probe.Resolver
	}{
		{"a file's symbols", without, probe.Resolver{Env: built, Bias: bias, Lines: built.line}},
		{"a file's symbols, built with them", withSyms, probe.Resolver{Env: built, Bias: bias, Lines: built.line}},
		{"a stripped file, built with symbols", withSyms, probe.Resolver{Bias: bias}},
		{"run-time symbols", without, probe.Resolver{Env: live, Lines: built.line, Slide: func() (uint64, error) { return bias, nil }}},
		{"run-time symbols without the types, built with them", withSyms, probe.Resolver{Env: table{"f": live["f"], "g": live["g"]},
			Slide: func() (uint64, error) { return bias, nil }}},
	}
	for _, c := range cases {
		for i := range c.m.Probes {
			d := &c.m.Probes[i]
			if i == 3 && c.r.Bias == 0 {
				// the running kernel: an address is one it runs at
				if a, err := c.r.Location(d); err != nil || a != 0x1000 {
					t.Errorf("%s: %s at %#x (%v), want 0x1000", c.name, d.Loc.Text, a, err)
				}
				continue
			}
			if a, err := c.r.Location(d); err != nil || a != wantLoc[i] {
				t.Errorf("%s: %s at %#x (%v), want %#x", c.name, d.Loc.Text, a, err, wantLoc[i])
			}
		}
		prog, refused, err := c.r.Relocate(c.m)
		if err != nil || refused != nil {
			t.Fatalf("%s: relocate: %v %v", c.name, err, refused)
		}
		if got := immediates(c.m, prog); fmt.Sprint(got) != fmt.Sprint(wantImm) {
			t.Errorf("%s: push d, hold %#x, want %#x", c.name, got, wantImm)
		}
	}

	// the slide unknown: type layouts of build time are used as they
	// are; a symbol's value is refused, its probe alone
	r := probe.Resolver{Slide: func() (uint64, error) { return 0, slideErr }}
	prog, refused, err := r.Relocate(withSyms)
	if err != nil {
		t.Fatal(err)
	}
	want := "push d,jiffies: no symbols; the value from build time cannot be moved to where the module runs: the slide is unknown"
	if len(refused) != 1 || refused[0] != want {
		t.Errorf("refused %v, want probe 0: %q", refused, want)
	}
	if got := immediates(withSyms, prog); got[1] != 0x58 || got[3] != 0x1c {
		t.Errorf("type layouts %#x, want 0x58 and 0x1c from build time", got)
	}
	for i, want := range []string{
		"offset = f+4: no symbols; the value from build time cannot be moved to where the module runs: the slide is unknown",
		"prog.c:6: no symbols; the value from build time cannot be moved to where the module runs: the slide is unknown",
	} {
		if _, err := r.Location(&withSyms.Probes[i]); err == nil || err.Error() != want {
			t.Errorf("location %d: %v, want %s", i, err, want)
		}
	}

	// nothing known, nothing from build time
	r = probe.Resolver{Env: table{}, Lines: table{}.line, Bias: bias}
	for i, want := range []string{"offset = f+4: f is not known", "prog.c:6: prog.c:6 is not known", "offset = g: g is not known"} {
		if _, err := r.Location(&without.Probes[i]); err == nil || err.Error() != want {
			t.Errorf("location %d: %v, want %s", i, err, want)
		}
	}
	if _, err := (probe.Resolver{}).Location(&without.Probes[0]); err == nil || err.Error() != "offset = f+4: no symbols for the module" {
		t.Errorf("no symbols: %v", err)
	}
	_, refused, err = r.Relocate(without)
	if err != nil || len(refused) != 2 || refused[0] != "push d,jiffies: jiffies is not known" ||
		refused[1] != "push d,offsetof(struct req, flags): offsetof struct req flags is not known" {
		t.Errorf("relocate: %v %v", err, refused)
	}
}
