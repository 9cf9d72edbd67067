//go:build linux

package kernel

import (
	"fmt"
	"os/exec"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/gprobes/gprobes/probe"
)

// BenchmarkHostUprobe: the time a call of a shared library's function
// takes (ns/op) in a process that makes b.N calls, unprobed; under a
// bare uprobe (a two-instruction eBPF program, what any uprobe tracer
// pays at the least, bpftrace's `uprobe:…{}` included); under a host
// probe counting into lv; under one that also commits a record of one
// word. Measured in one run, side by side.
func BenchmarkHostUprobe(b *testing.B) {
	dir := b.TempDir()
	lib := buildLib(b, dir, false)
	exe := buildUser(b, dir, lib)
	run := func(b *testing.B) {
		b.ResetTimer()
		out, err := exec.Command(exe, strconv.Itoa(b.N)).Output()
		b.StopTimer()
		if want := fmt.Sprintf("done %d\n", b.N*b.N); err != nil || string(out) != want {
			b.Fatalf("globuser %d: %q %v", b.N, out, err)
		}
	}
	b.Run("unprobed", run)
	b.Run("bare-uprobe", func(b *testing.B) {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.Kprobe, License: "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
		if err != nil {
			b.Skip(err)
		}
		defer prog.Close()
		ex, err := link.OpenExecutable(lib)
		if err != nil {
			b.Fatal(err)
		}
		l, err := ex.Uprobe("glob_fn", prog, nil)
		if err != nil {
			b.Skip(err)
		}
		defer l.Close()
		run(b)
	})
	for _, c := range []struct{ name, prog string }{
		{"gprobes-count", "inc lv,0\nexit 0\n"},
		{"gprobes-record", "inc lv,0\npush r,rdi\nlog 1\nexit 1\n"},
	} {
		b.Run(c.name, func(b *testing.B) {
			k, err := Start(Options{User: true})
			if err != nil {
				b.Skip(err)
			}
			defer k.Close()
			m := compile(b, fmt.Sprintf("name = %s\nmodtype = user\nvars = 1\noffset = glob_fn\n%s", lib, c.prog))
			if infos, err := k.Insert(m, probe.InsertNew); err != nil || infos[0].State != probe.StateActive {
				b.Fatalf("insert: %+v %v", infos, err)
			}
			run(b)
		})
	}
}
