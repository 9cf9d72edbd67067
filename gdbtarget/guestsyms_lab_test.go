package gdbtarget_test

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/gdbtarget"
	"github.com/gprobes/gprobes/linuxkernel"
	"github.com/gprobes/gprobes/symbols"
)

// guestKernel is the engine's view of the guest kernel.
func (g *guest) kernel() *linuxkernel.Kernel {
	var k *linuxkernel.Kernel
	g.eng.WithTarget(func(tg engine.Target) error {
		k = tg.OS().(*linuxkernel.Guest).K
		return nil
	})
	return k
}

// A guest probed with nothing but the guest: no --symbols, KASLR on. The
// symbols decoded from the kallsyms tables in its memory are, name, type
// and address, the core kernel's lines of its own /proc/kallsyms; a probe
// by function name counts the workload's calls exactly and reads
// task_struct.comm and the pid (task_struct.tgid) at the offsets of the
// kernel's BTF read from its memory, which are the lab vmlinux's .BTF's.
// A second guest of the same kernel (booted again: another slide) takes
// its symbols and types from the cache by build ID, and the probe counts
// exactly again. A third boot with the lab's System.map and vmlinux given
// is the baseline of the figures the test logs (BENCHMARKS.md).
func TestGuestSymbolsFromMemory(t *testing.T) {
	t.Setenv("GPROBES_KERNEL_CACHE", t.TempDir())
	for _, what := range []string{"first", "cached", "files"} {
		g := boot(t, true)
		out, rc, err := g.vm.Run("cat /proc/kallsyms", 5*time.Minute)
		if err != nil || rc != 0 {
			t.Fatalf("cat /proc/kallsyms: rc %d, %v", rc, err)
		}
		var want []symbols.Symbol
		for _, l := range strings.Split(out, "\n") {
			fs := strings.Fields(l)
			if len(fs) != 3 || len(fs[1]) != 1 { // a module's has a fourth field
				continue
			}
			a, err := strconv.ParseUint(fs[0], 16, 64)
			if err != nil {
				continue
			}
			want = append(want, symbols.Symbol{Addr: a, Kind: fs[1][0], Name: fs[2]})
		}
		if len(want) < 50000 {
			t.Fatalf("the guest's /proc/kallsyms has %d core symbols:\n%s", len(want), tailLines(out, 5))
		}
		start := time.Now()        // benchmark figures for BENCHMARKS.md, not asserted
		var opts gdbtarget.Options // files: the lab's System.map and vmlinux
		if what != "files" {
			opts.Symbols = []string{}
		}
		g.attach(opts)
		took := time.Since(start)
		k := g.kernel()
		syms, types := k.Sources()
		t.Logf("%s attach: %v; symbols: %s; types: %s", what, took, syms, types)
		wantFrom := map[string]string{"first": "kallsyms in guest memory", "cached": "cached by build ID", "files": "--symbols "}[what]
		if !strings.Contains(syms, wantFrom) || !strings.Contains(types, strings.Replace(wantFrom, "kallsyms", "BTF", 1)) {
			t.Errorf("%s: symbols from %q, types from %q: want %q", what, syms, types, wantFrom)
		}
		slide, _ := k.Slide()
		vmSlide, err := g.vm.Slide()
		if err != nil {
			t.Fatal(err)
		}
		if int64(slide) != vmSlide || slide == 0 {
			t.Errorf("%s: slide %#x, the guest says %#x", what, slide, vmSlide)
		}
		// compared with what the guest decoded (files: System.map and the
		// vmlinux's own symbol table, not what this test is about)
		if what != "files" {
			var got []symbols.Symbol
			for _, tab := range k.Symbols().Tables() {
				if tab.Len() > 0 {
					got = append(got, tab.Symbols()...)
				}
			}
			if len(got) != len(want) {
				t.Errorf("%s: %d symbols, the guest's /proc/kallsyms has %d core ones", what, len(got), len(want))
			}
			bad := 0
			for i := range min(len(got), len(want)) {
				s := got[i]
				if s.Addr >= 0xffffffff80000000 {
					s.Addr += slide
				}
				if s.Name != want[i].Name || s.Addr != want[i].Addr || s.Kind != want[i].Kind {
					if bad++; bad <= 5 {
						t.Errorf("%s: symbol %d: %#x %c %s, /proc/kallsyms %#x %c %s", what, i, s.Addr, s.Kind, s.Name, want[i].Addr, want[i].Kind, want[i].Name)
					}
				}
			}
			if bad > 5 {
				t.Errorf("%s: %d symbols differ", what, bad)
			}
		}
		file, err := symbols.Open(filepath.Join(g.art, "vmlinux"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"comm", "pid", "tgid"} {
			o, err := k.Symbols().Offsetof("struct task_struct", f)
			w, werr := symbols.NewSet(file).Offsetof("struct task_struct", f)
			if err != nil || werr != nil || o != w {
				t.Errorf("%s: offsetof(task_struct, %s) = %d (%v) from the guest's BTF, %d (%v) from the vmlinux's", what, f, o, err, w, werr)
			}
		}

		m := compile(t, syscalls)
		g.insert(m)
		t.Logf("%s: attach and insert (getppid, ksys_read, ksys_write, do_sys_openat2 by name, offsetof(struct task_struct, comm)): %v", what, time.Since(start))
		pid, _ := g.run("gpwork counts 4")
		n := 0
		for _, r := range g.of(pid, 1) {
			if string(r.Data[8:]) == "gpwork" {
				n++
			}
		}
		if n != 4 {
			t.Errorf("%s: getppid by gpwork (pid %d): %d hits, want 4", what, pid, n)
		}
		if _, err := g.eng.Close(); err != nil {
			t.Fatal(err)
		}
		g.vm.Kill()
	}
}
