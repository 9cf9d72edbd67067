//go:build linux

package bpf

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	dpdfc "github.com/gprobes/gprobes/compiler" // bpf has a type compiler
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/rpn"
)

// Load reports every attempt's refusal: when the verifier gives up on the
// straight program's size and refuses loop mode too, the error says both,
// each with its RPN instruction. The kernel is replaced (loadSpec): no
// program here is refused so by this host's.
func TestLoadReportsEveryAttempt(t *testing.T) {
	src := "name = vmlinux\nmodtype = kernel\noffset = 0x1000\npush d,1\npush d,2\nadd\nlog 1\nexit 1\n"
	f, err := dpdf.ParseSource("a.dpdf", []byte(src), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		t.Fatal(err)
	}
	p, err := dpdfc.CompileProgram(f, rpn.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// the raw offset of an instruction of RPN instruction i
	rawOf := func(c *Compiled, i int) int {
		for r, j := range c.rpn {
			if j == i {
				return r
			}
		}
		t.Fatalf("no eBPF for RPN instruction %d", i)
		return -1
	}
	var loops []bool
	refuse := func(big string) func(spec *ebpf.ProgramSpec, _ *btf.Cache) (*ebpf.Program, error) {
		return func(spec *ebpf.ProgramSpec, _ *btf.Cache) (*ebpf.Program, error) {
			loop := len(spec.Instructions) > 0 && strings.Contains(spec.Instructions.String(), "_cb")
			loops = append(loops, loop)
			c, _ := CompileProbe(p, 0, Options{Loop: loop})
			if !loop {
				return nil, &ebpf.VerifierError{Cause: unix.E2BIG, Log: []string{strings.Replace(big, "RAW", strconv.Itoa(rawOf(c, 2)), 1), "BPF program is too large. Processed 1000001 insn", "processed 1000001 insns (limit 1000000)"}}
			}
			return nil, &ebpf.VerifierError{Cause: unix.EACCES, Log: []string{strconv.Itoa(rawOf(c, 3)) + ": (7b) *(u64 *)(r3 +0) = r1", "invalid access to map value", "processed 99 insns (limit 1000000)"}}
		}
	}
	old := loadSpec
	defer func() { loadSpec = old }()
	loadSpec = refuse("RAW: (0f) r1 += r2")
	c, err := CompileProbe(p, 0, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Load()
	var ve *VerifierError
	if !errors.As(err, &ve) || ve.Straight == nil || !ve.Loop || ve.Straight.Loop {
		t.Fatalf("%v (%#v), want loop mode's refusal after the straight one's", err, ve)
	}
	if len(loops) != 2 || loops[0] || !loops[1] {
		t.Fatalf("attempts (loop mode of each): %v", loops)
	}
	msg := err.Error()
	for _, s := range []string{"straight: probe 0 pc 0x0012 at a.dpdf:6:1: BPF program is too large", "in loop mode: probe 0 pc 0x0013 at a.dpdf:7:1: invalid access to map value"} {
		if !strings.Contains(msg, s) {
			t.Errorf("%q lacks %q", msg, s)
		}
	}
	t.Log(msg)
}
