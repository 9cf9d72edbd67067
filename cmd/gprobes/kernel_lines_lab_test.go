//go:build linux

package main

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/lab/qemulab"
	"github.com/gprobes/gprobes/symbols"
)

// file:line on --target kernel, for real: the lab guest booted with KASLR,
// gprobes in it given the kernel's debug vmlinux (Debian's -dbg package,
// reduced to its line tables: qemulab.LineVmlinux) with --symbols. Two
// probes in getppid's source, kernel/sys.c: its opening line (the
// function's entry: fentry) and a line inside it (a kprobe mid-function).
// The lines are found on the host with addr2line (binutils, not gprobes'
// code) and their addresses with symbols.LineAddr on the same file; in the
// guest each probe counts exactly the workload's calls, and the kprobe's
// rip is the line's link-time address plus the guest's KASLR slide, which
// the guest's kallsyms gives (it is not 0: the slide arithmetic is
// exercised).
func TestKernelLabLines(t *testing.T) {
	qemulab.Require(t)
	vmlinux, err := qemulab.LineVmlinux()
	if err != nil {
		t.Fatal(err)
	}
	fn, err := qemulab.Symbol("__x64_sys_getppid")
	if err != nil {
		t.Fatal(err)
	}
	// the function's opening line, by addr2line on its first instruction
	out, err := exec.Command("addr2line", "-e", vmlinux, strconv.FormatUint(fn, 16)).Output()
	if err != nil {
		t.Fatalf("addr2line: %v", err)
	}
	file, ln, ok := strings.Cut(strings.TrimSpace(string(out)), ":")
	first, err2 := strconv.Atoi(ln)
	if !ok || err2 != nil || !strings.HasSuffix(file, "/kernel/sys.c") {
		t.Fatalf("addr2line says __x64_sys_getppid is at %q: want kernel/sys.c:LINE", out)
	}
	tb, err := symbols.Open(vmlinux)
	if err != nil {
		t.Fatal(err)
	}
	var set symbols.Set
	set.Add(tb)
	entry, actual, err := set.LineAddr("kernel/sys.c", first)
	if err != nil || actual != first || entry != fn {
		t.Fatalf("kernel/sys.c:%d: %#x (line %d) %v; want __x64_sys_getppid %#x", first, entry, actual, err, fn)
	}
	// a later line of the function whose code is past the entry
	mid, midAddr := 0, uint64(0)
	for l := first + 1; l < first+20 && mid == 0; l++ {
		a, actual, err := set.LineAddr("kernel/sys.c", l)
		if err == nil && actual == l && a > fn+5 && a < fn+0x40 {
			mid, midAddr = l, a
		}
	}
	if mid == 0 {
		t.Fatalf("no line of kernel/sys.c after %d has code inside __x64_sys_getppid", first)
	}
	t.Logf("kernel/sys.c:%d is __x64_sys_getppid (%#x), kernel/sys.c:%d is +%#x", first, fn, mid, midAddr-fn)
	dpdf := fmt.Sprintf(`name = vmlinux
modtype = kernel
vars = 2
offset = kernel/sys.c:%d
minor = 1
inc lv,0
push r,rip
log 1
exit 1
offset = kernel/sys.c:%d
minor = 2
inc lv,1
exit 0
`, mid, first)
	files := kernelLabFiles(t,
		qemulab.File{Guest: "/root/lines.dpdf", Data: []byte(dpdf)},
		qemulab.File{Guest: "/root/vmlinux-lines", Host: vmlinux})
	vm, err := qemulab.Boot(t.Context(), qemulab.Options{Files: files, KASLR: true, Memory: "1536M"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if e := vm.KernelErrors(); len(e) > 0 {
			t.Errorf("the guest's kernel complained:\n%s", strings.Join(e, "\n"))
		}
		vm.Kill()
	})
	slide, err := vm.Slide()
	if err != nil {
		t.Fatal(err)
	}
	if slide == 0 {
		t.Fatal("the guest booted with KASLR has a slide of 0: the slide arithmetic would not be tested")
	}
	t.Logf("KASLR slide %#x", slide)
	const calls = 1000
	t0 := time.Now()
	r := runKernel(t, vm, "--symbols /root/vmlinux-lines /root/lines.dpdf", fmt.Sprintf("gpwork counts %d", calls))
	t.Logf("gprobes run with the line tables: %v in the TCG guest", time.Since(t0).Round(time.Millisecond))
	r.probe(t, 1, "kprobe", "active", calls)
	r.probe(t, 2, "fentry", "active", calls)
	if row := r.rows[1]; row != nil && row["LOCATION"] != fmt.Sprintf("kernel/sys.c:%d", mid) {
		t.Errorf("minor 1 at %q", row["LOCATION"])
	}
	want := uint64(int64(midAddr) + slide)
	r.words(t, calls, func(v uint64) bool { return v == want })
	if len(r.lv) != 2 || r.lv[0] != calls || r.lv[1] != calls {
		t.Errorf("lv %v, want [%d %d]", r.lv, calls, calls)
	}
}
