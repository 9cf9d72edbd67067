//go:build linux

package bpf_test

import (
	"debug/elf"
	"encoding/binary"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/internal/testkit"
)

// push r where there are registers: a uprobe (the kernel type kprobes
// use, with the user pt_regs), on a function of a C process. The
// arguments, the probed address and a string the process holds come back
// in every record; the count is exact.
func TestUprobeRegisters(t *testing.T) {
	needBPF(t)
	path := testkit.CC(t, "probed", "-O1", "-no-pie", "testdata/probed.c")
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	syms, err := f.Symbols()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var addr uint64
	for _, s := range syms {
		if s.Name == "probed" {
			addr = s.Value
		}
	}
	if addr == 0 {
		t.Fatal("no symbol probed")
	}
	p := compileSrc(t, "name = probed\nmodtype = user\nvars = 1\ninc lv,0\npush r,rdi\npush r,rsi\npush r,rip\npush r,edi\nlog 4\npush d,100\npush r,rdx\nlog str\nexit 1")
	prog, m, _ := load(t, p, bpf.Options{Kind: bpf.KindUprobe})
	rd, err := bpf.NewReader(m)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	ex, err := link.OpenExecutable(path)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ex.Uprobe("probed", prog, nil)
	if err != nil {
		testkit.SkipOrFail(t, "uprobe: %v", err)
	}
	defer l.Close()
	const n = 1000
	out, err := exec.Command(path, "1000").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	l.Close()
	for i := 0; i < n; i++ {
		rd.SetDeadline(time.Now().Add(2 * time.Second))
		r, err := rd.Read()
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		le := binary.LittleEndian
		if len(r.Log) != 32+len("hello, uprobe") {
			t.Fatalf("record %d: log %q", i, r.Log)
		}
		a, b, rip, edi := le.Uint64(r.Log), le.Uint64(r.Log[8:]), le.Uint64(r.Log[16:]), le.Uint64(r.Log[24:])
		if a != uint64(i) || b != uint64(1000+i) || rip != addr || edi != uint64(i) || string(r.Log[32:]) != "hello, uprobe" {
			t.Fatalf("record %d: rdi %d rsi %d rip %#x edi %d %q; want %d %d %#x", i, a, b, rip, edi, r.Log[32:], i, 1000+i, addr)
		}
	}
	lv, _ := m.Vars(false)
	if lv[0] != n {
		t.Fatalf("lv 0 = %d, want %d", lv[0], n)
	}
	t.Logf("%d hits of probed at %#x, each with its arguments and string (%s)", n, addr, strings.TrimSpace(string(out)))
}
