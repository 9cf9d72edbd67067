//go:build linux

package kernel

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/symbols"
)

// kallsyms' text symbols that share an address are aliases of one
// another; data symbols and single names are not.
func TestReadAliases(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kallsyms")
	os.WriteFile(p, []byte(`ffffffff81000000 T _stext
ffffffff810be3a0 t __do_sys_getppid
ffffffff810be3a0 T __ia32_sys_getppid
ffffffff810be3a0 T __x64_sys_getppid
ffffffff810be3e0 T __x64_sys_getpid
ffffffff82000000 D some_data
ffffffff82000000 d other_data
ffffffffc020c6b0 t rmd160_final	[rmd160]
ffffffffc020c6b0 t rmd160_final_alias	[rmd160]
0000000000000000 T zeroed
0000000000000000 T zeroed_too
`), 0o644)
	got := readAliases(p)
	want := map[uint64][]string{
		0xffffffff810be3a0: {"__do_sys_getppid", "__ia32_sys_getppid", "__x64_sys_getppid"},
		0xffffffffc020c6b0: {"rmd160_final", "rmd160_final_alias"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("aliases %v, want %v", got, want)
	}
}

func TestSplitKallsyms(t *testing.T) {
	in := "ffffffff81000000 T _stext\nffffffffc020c6b0 t rmd160_final\t[rmd160]\nffffffff810be3a0 T __x64_sys_getppid\nffffffffa0000000 t bpf_prog_6deef7357e7b4530\t[bpf]"
	core, mods := splitKallsyms([]byte(in))
	if string(core) != "ffffffff81000000 T _stext\nffffffff810be3a0 T __x64_sys_getppid\n" ||
		string(mods) != "ffffffffc020c6b0 t rmd160_final\t[rmd160]\nffffffffa0000000 t bpf_prog_6deef7357e7b4530\t[bpf]" {
		t.Errorf("core %q\nmods %q", core, mods)
	}
}

// The instruction-boundary and opcode checks decode the text gprobes
// first read of a function, not the live text, which holds gprobes' own
// kprobes: with a kprobe at +0xd (an int3 over "mov $0x1,%esi"'s first
// byte), the live text makes +0xe look like a boundary (the refusal of
// a non-boundary came from the kernel, without the instruction's name),
// and an opcode check at +0xd read 0xcc. Here the first text is put in
// the cache by hand, at an address no one can read: the checks use it.
func TestCheckCodeDecodesFirstText(t *testing.T) {
	k, _ := start(t, Options{})
	if k.kmem == nil {
		t.Skip("the kernel's text cannot be read here")
	}
	// __x64_sys_getppid of the lab's Debian 6.1: nopl (ftrace's site), push
	// %rbx, call, xor %edx,%edx, mov $0x1,%esi, then nops to the end
	code := []byte{0x0f, 0x1f, 0x44, 0x00, 0x00, 0x53, 0xe8, 0x05, 0x59, 0x07, 0x00, 0x31, 0xd2, 0xbe, 0x01, 0x00, 0x00, 0x00}
	for len(code) < 64 {
		code = append(code, 0x90)
	}
	const addr = 0x10 // not kernel memory: a read of it fails
	fn := symbols.Symbol{Name: "f", Addr: addr, Size: 64, Kind: 'T'}
	k.syms.text = map[uint64]funcText{addr: {code: code}}
	m := compile(t, "name = vmlinux\nmodtype = kernel\noffset = 0x1d\nopcode = 0xbe\nexit 0\n")
	p := &bprobe{Probe: &probe.Probe{}, s: &source{src: m}}
	if err := k.checkCode(p, fn, 0xd); err != nil {
		t.Errorf("+0xd: %v", err)
	}
	err := k.checkCode(p, fn, 0xe)
	if err == nil || err.Error() != "f+0xe is not an instruction boundary: the instruction at +0xd (MOV ESI, 0x1) runs to +0x12" {
		t.Errorf("+0xe: %v", err)
	}
	err = k.checkCode(p, fn, 0xb)
	if _, ok := err.(*mismatch); !ok || !strings.Contains(err.Error(), "the byte at f+0xb is 0x31, not the opcode 0xbe") {
		t.Errorf("+0xb: %v", err)
	}
	// past what was read: read again (here it fails, the address is 0x10)
	if err := k.checkCode(p, fn, 0x40); err == nil || !strings.Contains(err.Error(), "reading the kernel's text at f") {
		t.Errorf("+0x40: %v", err)
	}
}

// A function's text is read once, the whole of it when kallsyms implies
// its size, and kept; more is read only past it.
func TestFuncTextReadOnce(t *testing.T) {
	k, _ := start(t, Options{})
	if k.kmem == nil {
		t.Skip("the kernel's text cannot be read here")
	}
	fn, err := k.syms.kall.Lookup("__x64_sys_getppid")
	if err != nil {
		t.Fatal(err)
	}
	fn, off, err := k.function(fn.Addr)
	if err != nil || off != 0 {
		t.Fatal(fn, off, err)
	}
	t.Logf("%s at %#x, size %d", fn.Name, fn.Addr, fn.Size)
	code, err := k.funcText(fn, 16)
	if err != nil {
		t.Fatal(err)
	}
	if want := max(16, fn.Size); uint64(len(code)) != want {
		t.Errorf("read %d bytes, want %d", len(code), want)
	}
	code[5] = 0xcc // what a kprobe would have done to the live text
	again, _ := k.funcText(fn, uint64(len(code)))
	if &again[0] != &code[0] || again[5] != 0xcc {
		t.Error("read again")
	}
	more, err := k.funcText(fn, uint64(len(code))+32)
	if err != nil {
		t.Fatal(err)
	}
	if len(more) != len(code)+32 || more[5] != 0xcc {
		t.Errorf("extended to %d bytes (want %d), byte 5 %#x (the first read's, 0xcc, kept)", len(more), len(code)+32, more[5])
	}
}

// A module unloaded and loaded again between two polls has the same name
// in /proc/modules, but a new /sys/module folder.
func TestReloadedSince(t *testing.T) {
	ents, _ := os.ReadDir("/sys/module")
	if len(ents) == 0 {
		t.Skip("no /sys/module")
	}
	name := ents[0].Name()
	k := &ksyms{ino: map[string]uint64{name: moduleIno(name)}}
	if k.reloadedSince(name) {
		t.Errorf("%s: reloaded, with the same folder", name)
	}
	k.ino[name]++
	if !k.reloadedSince(name) {
		t.Errorf("%s: not reloaded, with another folder", name)
	}
	if k.reloadedSince("no_such_module_gp") {
		t.Error("a module never seen: reloaded")
	}
}

// BenchmarkInsert100Tracepoints: a module of 100 tracepoint probes (the
// sys_enter events of 100 system calls, each counting) inserted and
// removed; insert-ms and remove-ms are one insert's and one remove's
// wall time (the aim: a module of 100 probes inserts in under a second;
// docs/kernel.md, "Where probes go").
// This machine has no kprobes or fentry: the lab guest's TestKernelLab
// times 100 function probes.
//
//	go test -run '^$' -bench Insert100 ./kernel
func BenchmarkInsert100Tracepoints(b *testing.B) {
	if err := bpf.Available(); err != nil {
		b.Skip(err)
	}
	var events []string
	for _, dir := range []string{"/sys/kernel/tracing/events/syscalls", "/sys/kernel/debug/tracing/events/syscalls"} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "sys_enter_") {
				events = append(events, e.Name())
			}
		}
		if len(events) > 0 {
			break
		}
	}
	if len(events) < 100 {
		b.Skipf("%d sys_enter tracepoints, want 100", len(events))
	}
	var src strings.Builder
	src.WriteString("name = vmlinux\nmodtype = kernel\nvars = 1\n")
	for i, e := range events[:100] {
		fmt.Fprintf(&src, "\ntracepoint = syscalls:%s\nminor = %d\ninc lv,0\nexit 0\n", e, i+1)
	}
	k, err := Start(Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer k.Close()
	f, err := dpdf.ParseSource("many.dpdf", []byte(src.String()), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		b.Fatal(err)
	}
	m, err := compiler.Compile(f, rpn.CompileOptions{})
	if err != nil {
		b.Fatal(err)
	}
	var ins, rm time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		ps, err := k.Insert(m, probe.InsertNew)
		t1 := time.Now()
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range ps {
			if p.State != probe.StateActive {
				b.Fatalf("%s: %s (%s)", p.Location, p.State, p.Reason)
			}
		}
		if _, err := k.Remove("vmlinux", nil); err != nil {
			b.Fatal(err)
		}
		ins += t1.Sub(t0)
		rm += time.Since(t1)
	}
	b.ReportMetric(float64(ins.Microseconds())/1000/float64(b.N), "insert-ms")
	b.ReportMetric(float64(rm.Microseconds())/1000/float64(b.N), "remove-ms")
}
