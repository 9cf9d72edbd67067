//go:build linux

package kernel

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
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
// word; under bpftrace 0.17 counting the calls (uprobe:LIB:glob_fn {
// @n = count(); }), the peer a user compares with. Measured in one run,
// side by side.
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
	// bpftrace's count of the same function's calls, the peer's way:
	// BEGIN runs once its uprobe is attached
	b.Run("bpftrace-count", func(b *testing.B) {
		bt, err := exec.LookPath("bpftrace")
		if err != nil {
			b.Skip("no bpftrace: ", err)
		}
		cmd := exec.Command(bt, "-e", fmt.Sprintf(`BEGIN { printf("ready\n"); } uprobe:%s:glob_fn { @n = count(); }`, lib))
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		ready := false
		for !ready && sc.Scan() {
			ready = strings.Contains(sc.Text(), "ready")
		}
		if !ready {
			cmd.Process.Kill()
			cmd.Wait()
			b.Fatal("bpftrace did not start")
		}
		run(b)
		cmd.Process.Signal(os.Interrupt)
		var rest strings.Builder
		for sc.Scan() {
			rest.WriteString(sc.Text() + "\n")
		}
		cmd.Wait()
		if !strings.Contains(rest.String(), "@n: ") {
			b.Fatalf("bpftrace counted nothing: %q", rest.String())
		}
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
