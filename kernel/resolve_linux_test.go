package kernel

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
)

// buildTime is what a build with --symbols saw: made-up symbols and a
// type the running kernel does not have.
type buildTime map[string]uint64

func (b buildTime) get(k string) (uint64, error) {
	if v, ok := b[k]; ok {
		return v, nil
	}
	return 0, fmt.Errorf("%s is not in the build's symbols", k)
}
func (b buildTime) Symbol(name string) (uint64, error) { return b.get(name) }
func (b buildTime) Sizeof(typ string) (uint64, error)  { return b.get("sizeof " + typ) }
func (b buildTime) Offsetof(typ, field string) (uint64, error) {
	return b.get("offsetof " + typ + " " + field)
}
func (b buildTime) LineAddr(file string, line int) (uint64, int, error) {
	v, err := b.get(fmt.Sprintf("%s:%d", file, line))
	return v, line, err
}
func (b buildTime) BuildID() []byte { return nil }

// TestBuildTimeValues: a PPDF built with --symbols against this kernel
// carries the values of its push d, from build time; where the running
// kernel cannot answer (a type its BTF lacks, a variable kallsyms does not
// list), the kernel target uses them as the process targets do: a type
// layout as it is, a symbol slid by KASLR's offset (kallsyms' _stext minus
// the --symbols'). Without --symbols the slide is unknown: the probe that
// needs it is refused alone, saying both why, and the module's other probe
// goes in. Before, every such push d, refused its probe.
func TestBuildTimeValues(t *testing.T) {
	const src = `name = vmlinux
modtype = kernel
vars = 2
tracepoint = syscalls:sys_enter_getppid
push d,sizeof(struct gp_build_only)
pop lv,0
exit 0
tracepoint = syscalls:sys_enter_getppid
minor = 2
push d,gp_build_only_variable + 8
pop lv,1
exit 0
`
	const link = 0xffffffff81234560
	f, err := dpdf.ParseSource("build.dpdf", []byte(src), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		t.Fatal(err)
	}
	m, err := compiler.Compile(f, rpn.CompileOptions{Symbols: buildTime{"sizeof struct gp_build_only": 24, "gp_build_only_variable": link}})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Relocs) != 2 || !m.Relocs[0].Resolved || !m.Relocs[1].Resolved {
		t.Fatalf("relocations %+v: want two resolved at build time", m.Relocs)
	}

	// without --symbols: the type's size from build time, the variable
	// refused
	k, _ := start(t, Options{PID: os.Getpid()})
	infos, err := k.Insert(m, probe.InsertNew)
	if err != nil {
		t.Fatal(err)
	}
	want := "push d,gp_build_only_variable + 8: "
	if len(infos) != 2 || infos[0].State != probe.StateActive || infos[1].State != probe.StateRefused ||
		!strings.HasPrefix(infos[1].Reason, want) || !strings.HasSuffix(infos[1].Reason, "; the value from build time cannot be moved to where the module runs: the KASLR slide is known only with --symbols (this kernel's System.map or vmlinux; gprobes slides by _stext)") {
		t.Fatalf("insert without --symbols: %+v", infos)
	}
	t.Logf("refused: %s", infos[1].Reason)
	getppid(3)
	if lv, _, err := k.Vars("vmlinux", false); err != nil || lv[0] != 24 || lv[1] != 0 {
		t.Fatalf("lv %v %v, want [24 0]", lv, err)
	}
	k.Close()

	// with a System.map of the build (its _stext, not the variable): the
	// variable's build-time address slid
	kall, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	var stext uint64
	for _, l := range strings.Split(string(kall), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[2] == "_stext" {
			stext, _ = strconv.ParseUint(f[0], 16, 64)
		}
	}
	if stext == 0 {
		t.Fatal("no _stext in /proc/kallsyms")
	}
	sysmap := filepath.Join(t.TempDir(), "System.map")
	if err := os.WriteFile(sysmap, []byte("ffffffff81000000 T _stext\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	k2, _ := start(t, Options{PID: os.Getpid(), Symbols: []string{sysmap}})
	infos, err = k2.Insert(m, probe.InsertNew)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 || infos[0].State != probe.StateActive || infos[1].State != probe.StateActive {
		t.Fatalf("insert with --symbols: %+v", infos)
	}
	getppid(3)
	slid := uint64(link) + 8 + stext - 0xffffffff81000000
	if lv, _, err := k2.Vars("vmlinux", false); err != nil || lv[0] != 24 || lv[1] != slid {
		t.Fatalf("lv %#x %v, want [0x18 %#x] (the build's address slid by kallsyms' _stext %#x)", lv, err, slid, stext)
	}
}
