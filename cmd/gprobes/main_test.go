package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/internal/testkit"
)

var update = flag.Bool("update", false, "rewrite golden files (docs/cli.md, testdata/*.golden)")

// gprobes runs the command line in-process and returns stdout, stderr and
// the exit status.
func gprobes(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"gprobes"}, args...), &out, &errb)
	return out.String(), errb.String(), code
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, errs, code := gprobes(t, args...)
	if code != 0 {
		t.Fatalf("gprobes %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

// need is testkit.Need: skip, or fail under CI=true, when a tool is
// missing.
func need(t *testing.T, tools ...string) {
	t.Helper()
	testkit.Need(t, tools...)
}

const examples = "../../testdata/examples"

func simJSON(t *testing.T, args ...string) map[string]any {
	t.Helper()
	out := mustRun(t, append([]string{"sim"}, append(args, "--json")...)...)
	if strings.Count(out, "\n") != 1 {
		t.Fatalf("sim --json printed more than one line:\n%s", out)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return v
}

func hits(t *testing.T, v map[string]any) []map[string]any {
	var out []map[string]any
	for _, h := range v["hits"].([]any) {
		out = append(out, h.(map[string]any))
	}
	return out
}

// The two examples of the Dynamic Probes paper behave as it describes.
func TestPaperExamples(t *testing.T) {
	dir := t.TempDir()
	malloc := filepath.Join(examples, "malloc.dpdf")
	pp := filepath.Join(dir, "malloc.ppdf")
	mustRun(t, "build", malloc, "-o", pp)
	for _, file := range []string{malloc, pp} {
		// malloc(0x20000000): take a core dump (exit 3)
		h := hits(t, simJSON(t, file, "--reg", "rdi=0x20000000"))
		if h[0]["outcome"] != "exit" || h[0]["exit"] != 3.0 {
			t.Errorf("%s: malloc(0x20000000) gave %v", file, h[0])
		}
		// any other size: exit without further ado, nothing logged
		h = hits(t, simJSON(t, file, "--reg", "rdi=4096"))
		if h[0]["outcome"] != "exit" || h[0]["exit"] != 0.0 || h[0]["log"] != "" {
			t.Errorf("%s: malloc(4096) gave %v", file, h[0])
		}
	}

	fk := filepath.Join(examples, "fork_kill.dpdf")
	stack := "00112233445566778899aabbccddeeff"
	for probe, lvIndex := range []int{0, 1} { // probe 0 kill (lv 0), probe 1 fork (lv 1)
		v := simJSON(t, fk, "--probe", fmt.Sprint(probe), "--hits", "1001",
			"--reg", "rsp=0xffffc90000a3fe00", "--mem", "0xffffc90000a3fe00="+stack+"ffffffff")
		h := hits(t, v)
		for i := 0; i < 1000; i++ {
			if h[i]["outcome"] != "exit" || h[i]["exit"] != 1.0 || h[i]["log"] != stack ||
				h[i]["major"] != 1.0 || h[i]["minor"] != float64(probe+1) {
				t.Fatalf("probe %d hit %d: %v", probe, i+1, h[i])
			}
		}
		if h[1000]["outcome"] != "skipped" {
			t.Errorf("probe %d hit 1001 after max hits = 1000: %v", probe, h[1000])
		}
		lv := v["lv"].([]any)
		if lv[lvIndex] != "1000" || lv[1-lvIndex] != "0" || v["disabled"] != true {
			t.Errorf("probe %d: lv %v disabled %v", probe, lv, v["disabled"])
		}
	}
}

// The JSON object of sim has exactly the shape other checks rely on.
func TestSimJSONShape(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "p.dpdf")
	os.WriteFile(src, []byte("name = x\nmodtype = user\nmajor = 1\nvars = 2\noffset = 0x1000\nminor = 2\npush d,10\nlog 1\nexit 1\n"), 0o644)
	out := mustRun(t, "sim", src, "--lv", "1=3", "--json")
	want := `{"hits":[{"outcome":"exit","exit":1,"exception":"","major":1,"minor":2,"log":"0a00000000000000","truncated":false}],"lv":["0","3"],"gv":[],"disabled":false}` + "\n"
	if out != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}
}

func TestBuildIsByteIdentical(t *testing.T) {
	dir := t.TempDir()
	for _, ex := range []string{"fork_kill", "malloc"} {
		a, b := filepath.Join(dir, ex+"1.ppdf"), filepath.Join(dir, ex+"2.ppdf")
		mustRun(t, "build", filepath.Join(examples, ex+".dpdf"), "-o", a)
		mustRun(t, "build", "-o", b, filepath.Join(examples, ex+".dpdf"))
		x, _ := os.ReadFile(a)
		y, _ := os.ReadFile(b)
		if !bytes.Equal(x, y) || len(x) == 0 {
			t.Errorf("%s: builds differ", ex)
		}
		// the listing of the PPDF is the listing of the DPDF
		if d1, d2 := mustRun(t, "disasm", filepath.Join(examples, ex+".dpdf")), mustRun(t, "disasm", a); d1 != d2 {
			t.Errorf("%s: disasm differs:\n%s\n%s", ex, d1, d2)
		}
	}
}

func TestDisasmGolden(t *testing.T) {
	for _, ex := range []string{"fork_kill", "malloc"} {
		got := mustRun(t, "disasm", filepath.Join(examples, ex+".dpdf"))
		golden := filepath.Join("testdata", ex+".disasm.golden")
		if *update {
			os.MkdirAll("testdata", 0o755)
			os.WriteFile(golden, []byte(got), 0o644)
			continue
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatal(err)
		}
		if got != string(want) {
			t.Errorf("%s differs:\n%s", golden, got)
		}
	}
}

func TestCheckReportsEveryError(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "bad.dpdf")
	os.WriteFile(src, []byte("name = x\nmodtype = usr\noffset = 1\npush r,rxa\njmp nowhere\nlog 99\n"), 0o644)
	out, errs, code := gprobes(t, "check", src)
	if code != 1 || out != "" {
		t.Errorf("exit %d, stdout %q", code, out)
	}
	for _, want := range []string{
		src + ":2:11: modtype must be",
		src + ":4:8: unknown register \"rxa\"",
		"    4 | push r,rxa\n      |        ^",
		src + ":5:5: undefined label nowhere",
		src + ":6:5: log word count must be 1..32",
		"4 errors",
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	// every error of a file at once: an unknown instruction, a bad variable index and a jump
	// to an undefined label (the syntax error hid the third), with a
	// duplicate label and a static call chain too deep for the verifier
	// in the next probe: all of them, sorted, in one run
	src = filepath.Join(dir, "three.dpdf")
	chain := ""
	for i := 1; i <= 33; i++ {
		chain += fmt.Sprintf("c%d: call c%d\nret\n", i, i+1)
	}
	os.WriteFile(src, []byte("name = x\nmodtype = user\nvars = 1\noffset = 1\nfoo 3\npush lv,5\njmp nowhere\nl: nop\nl: exit\noffset = 2\ncall c1\nexit\n"+chain+"c34: ret\n"), 0o644)
	_, errs, code = gprobes(t, "check", src)
	want := src + ":5:1: unknown instruction \"foo\" (did you mean \"pop\"?)\n    5 | foo 3\n      | ^\n" +
		src + ":6:9: lv index must be 0..0, not 5\n    6 | push lv,5\n      |         ^\n" +
		src + ":7:5: undefined label nowhere\n    7 | jmp nowhere\n      |     ^\n" +
		src + ":9:1: label l defined twice in this probe (first at line 8)\n    9 | l: exit\n      | ^\n" +
		src + ":11:1: calls nest 34 deep: at most 32\n   11 | call c1\n      | ^\n" +
		"5 errors\n"
	if code != 1 || errs != want {
		t.Errorf("exit %d, stderr\n%s\nwant\n%s", code, errs, want)
	}
	out = mustRun(t, "check", filepath.Join(examples, "malloc.dpdf"), filepath.Join(examples, "fork_kill.dpdf"))
	if strings.Count(out, ": ok:") != 2 {
		t.Errorf("check of the examples: %s", out)
	}
}

func TestBadPPDF(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "m.ppdf")
	mustRun(t, "build", filepath.Join(examples, "malloc.dpdf"), "-o", good)
	data, _ := os.ReadFile(good)
	cases := map[string][]byte{
		"truncated": data[:len(data)/2],
		"tampered":  append(append(append([]byte{}, data[:40]...), data[40]^0xff), data[41:]...),
		"version":   append(append(append([]byte{}, data[:9]...), 9, 0), data[11:]...),
	}
	wants := map[string]string{"truncated": "truncated", "tampered": "checksum mismatch", "version": "PPDF version 9 is newer"}
	for name, b := range cases {
		p := filepath.Join(dir, name+".ppdf")
		os.WriteFile(p, b, 0o644)
		for _, cmd := range []string{"disasm", "sim"} {
			_, errs, code := gprobes(t, cmd, p)
			if code != 1 || !strings.Contains(errs, wants[name]) || !strings.Contains(errs, p) {
				t.Errorf("%s %s: exit %d, %s", cmd, name, code, errs)
			}
		}
	}
}

// A Makefile rebuilds a PPDF when its DPDF, an included file or a symbol
// file changes, through the dependency file of build -MD.
func TestMakeDependencies(t *testing.T) {
	need(t, "make", "cpp")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	// the test binary acts as gprobes when GPROBES_TEST_MAIN is set
	script := fmt.Sprintf("#!/bin/sh\nGPROBES_TEST_MAIN=1 exec %s \"$@\"\n", exe)
	os.WriteFile(filepath.Join(bin, "gprobes"), []byte(script), 0o755)
	os.MkdirAll(filepath.Join(dir, "inc"), 0o755)
	os.WriteFile(filepath.Join(dir, "inc", "defs.h"), []byte("#define SIZE 0x20000000\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "syms.map"), []byte("0000000000001000 T malloc\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "probe.dpdf"), []byte("#include \"defs.h\"\nname = libc.so.6\nmodtype = user\noffset = malloc\npush r,rdi\npush d,SIZE\nsub\njz dump\nexit 0\ndump: exit 3\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "Makefile"), []byte("probe.ppdf: probe.dpdf\n\tgprobes build -MD -I inc --symbols syms.map -o $@ $<\n-include probe.d\n"), 0o644)
	mk := func(args ...string) int {
		c := exec.Command("make", append([]string{"-C", dir}, args...)...)
		c.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
		out, err := c.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		} else if err != nil {
			t.Fatalf("make: %v\n%s", err, out)
		}
		return 0
	}
	if mk() != 0 {
		t.Fatal("make failed")
	}
	dep, _ := os.ReadFile(filepath.Join(dir, "probe.d"))
	for _, want := range []string{"probe.ppdf:", "probe.dpdf", "inc/defs.h", "syms.map", "\ninc/defs.h:\n"} {
		if !strings.Contains(string(dep), want) {
			t.Errorf("probe.d lacks %q:\n%s", want, dep)
		}
	}
	if mk("-q") != 0 {
		t.Error("make -q: not up to date right after make")
	}
	// move each prerequisite in turn past the PPDF, in the future so the
	// test does not depend on the file system's timestamp resolution
	base := time.Now().Add(time.Minute)
	for i, f := range []string{"inc/defs.h", "syms.map", "probe.dpdf"} {
		at := base.Add(time.Duration(i) * time.Minute)
		os.Chtimes(filepath.Join(dir, f), at, at)
		if mk("-q") == 0 {
			t.Errorf("touching %s does not make probe.ppdf out of date", f)
		}
		if mk() != 0 {
			t.Fatal("make failed")
		}
		built := at.Add(30 * time.Second)
		os.Chtimes(filepath.Join(dir, "probe.ppdf"), built, built)
		if mk("-q") != 0 {
			t.Errorf("after rebuilding for %s, make -q still wants to build", f)
		}
	}
	// the resolved symbol from the symbol file is in the PPDF
	out := mustRun(t, "disasm", filepath.Join(dir, "probe.ppdf"))
	if !strings.Contains(out, "offset = malloc = 0x1000") {
		t.Errorf("disasm:\n%s", out)
	}
}

func TestMain(m *testing.M) {
	if os.Getenv("GPROBES_TEST_PEAKRSS") == "1" {
		os.Exit(peakRSSMain())
	}
	if os.Getenv("GPROBES_TEST_MAIN") == "1" {
		os.Exit(run(os.Args, os.Stdout, os.Stderr))
	}
	// a gprobes run in the test process that starts gprobes again (the
	// guard of run --target pid:N) starts this binary: as gprobes
	os.Setenv("GPROBES_TEST_MAIN", "1")
	testkit.Main(m)
}

func TestFlagsAfterArguments(t *testing.T) {
	a := mustRun(t, "sim", filepath.Join(examples, "malloc.dpdf"), "--reg", "rdi=0x20000000", "--json")
	b := mustRun(t, "sim", "--json", "--reg=rdi=0x20000000", filepath.Join(examples, "malloc.dpdf"))
	if a != b || !strings.Contains(a, `"exit":3`) {
		t.Errorf("%s\n%s", a, b)
	}
}

func TestSimInputErrors(t *testing.T) {
	m := filepath.Join(examples, "malloc.dpdf")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--reg", "rxx=1"}, `unknown register "rxx"`},
		{[]string{"--reg", "rdi"}, "want NAME=VALUE"},
		{[]string{"--mem", "0x1000=zz"}, "hex digits"},
		{[]string{"--probe", "3"}, "probe 3 does not exist: the module has 1 probes"},
		{[]string{"--lv", "0=1"}, "--lv 0: the module has 0 local variables"},
		{[]string{"--reg", "rdi=12q"}, "malformed number"},
	} {
		_, errs, code := gprobes(t, append([]string{"sim", m}, c.args...)...)
		if code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, %s", c.args, code, errs)
		}
	}
}

func TestSimIOIsRefusedWithoutPorts(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "io.dpdf")
	os.WriteFile(src, []byte("name = vmlinux\nmodtype = kernel\noffset = 1\npush d,0x70\npush io,1\nlog 1\nexit\n"), 0o644)
	_, errs, code := gprobes(t, "sim", src)
	if code != 1 || !strings.Contains(errs, "io.dpdf:5") || !strings.Contains(errs, "--io PORT=VALUE") {
		t.Errorf("exit %d: %s", code, errs)
	}
	h := hits(t, simJSON(t, src, "--io", "0x70=0x42"))
	if h[0]["log"] != "4200000000000000" {
		t.Errorf("%v", h[0])
	}
}

// sim --core reads the registers and memory of a real core file.
func TestSimCore(t *testing.T) {
	need(t, "gcc", "gdb")
	dir := t.TempDir()
	src := filepath.Join(dir, "prog.c")
	os.WriteFile(src, []byte(`#include <stdio.h>
#include <unistd.h>
char message[64] = "hello from a core file";
int main(void) {
	printf("%p\n", (void *)message);
	fflush(stdout);
	for (;;) pause();
}
`), 0o644)
	bin := testkit.CC(t, "prog", "-O0", src)
	cmd := exec.Command(bin)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var addr string
	fmt.Fscan(stdout, &addr)
	core := filepath.Join(dir, "core")
	if out, err := exec.Command("gdb", "-batch", "-p", fmt.Sprint(cmd.Process.Pid), "-ex", "gcore "+core).CombinedOutput(); err != nil {
		t.Fatalf("gcore: %v\n%s", err, out)
	}
	probe := filepath.Join(dir, "p.dpdf")
	os.WriteFile(probe, []byte("name = prog\nmodtype = user\noffset = main\npush d,64\npush d,"+addr+"\nlog str\npush pid\npush r,rsp\npush mrf\nlog 2\nexit 1\n"), 0o644)
	h := hits(t, simJSON(t, probe, "--core", core))
	logHex := h[0]["log"].(string)
	msg := fmt.Sprintf("%x", "hello from a core file")
	if !strings.HasPrefix(logHex, msg) {
		t.Fatalf("log %s does not start with the string %s", logHex, msg)
	}
	var pid uint64
	fmt.Sscanf(logHex[len(msg):len(msg)+16], "%x", &pid)
	// the pid is little-endian in the log
	b := make([]byte, 8)
	fmt.Sscanf(logHex[len(msg):len(msg)+16], "%x", &b)
	got := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24
	if got != uint64(cmd.Process.Pid) {
		t.Errorf("push pid = %d, want %d", got, cmd.Process.Pid)
	}
}

func TestCLIReferenceIsCurrent(t *testing.T) {
	got := mustRun(t, "man", "--markdown")
	path := "../../docs/cli.md"
	header := "<!-- Generated by \"gprobes man --markdown\"; go test ./cmd/gprobes -update rewrites it. -->\n\n"
	if *update {
		os.WriteFile(path, []byte(header+got), 0o644)
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if header+got != string(want) {
		t.Error("docs/cli.md is out of date: run go test ./cmd/gprobes -update")
	}
	if man := mustRun(t, "man"); !strings.Contains(man, ".SH") {
		t.Error("man page is not roff")
	}
	if c := mustRun(t, "completion", "bash"); !strings.Contains(c, "complete -o filenames -F _gprobes gprobes") {
		t.Error("bash completion")
	}
	// urfave/cli reads os.Args for completion, so run the binary itself
	exe, _ := os.Executable()
	cmd := exec.Command(exe, "--generate-bash-completion")
	cmd.Env = append(os.Environ(), "GPROBES_TEST_MAIN=1")
	c, err := cmd.Output()
	if err != nil || !strings.Contains(string(c), "sim") || !strings.Contains(string(c), "build") {
		t.Errorf("completion candidates: %q %v", c, err)
	}
}

// build --symbols with a real ELF built with -g: a symbol, a source line, a
// struct layout and a global resolve at build time, to the values nm and
// the compiler give, and the PPDF records the ELF build ID.
func TestBuildWithELFSymbols(t *testing.T) {
	need(t, "gcc", "nm", "readelf")
	dir := t.TempDir()
	src := filepath.Join(dir, "prog.c")
	os.WriteFile(src, []byte(`#include <stddef.h>
#include <stdio.h>
struct req { long id; char name[16]; int flags; };
struct req current = { 7, "x", 1 };
int handle(struct req *r) {
	int n = r->flags * 2;   /* line 6 */
	return n + (int)r->id;
}
int main(void) {
	printf("%zu %zu\n", offsetof(struct req, flags), sizeof(struct req));
	return handle(&current) == 0;
}
`), 0o644)
	bin := testkit.CC(t, "prog", "-g", "-O0", "-Wl,--build-id", src)
	layout, err := exec.Command(bin).Output()
	if err != nil && len(layout) == 0 {
		t.Fatal(err)
	}
	var offFlags, size uint64
	fmt.Sscan(string(layout), &offFlags, &size)
	nm, _ := exec.Command("nm", bin).Output()
	addr := func(sym string) uint64 {
		for _, l := range strings.Split(string(nm), "\n") {
			f := strings.Fields(l)
			if len(f) == 3 && f[2] == sym {
				var v uint64
				fmt.Sscanf(f[0], "%x", &v)
				return v
			}
		}
		t.Fatalf("nm has no %s", sym)
		return 0
	}
	probe := filepath.Join(dir, "p.dpdf")
	os.WriteFile(probe, []byte(`name = prog
modtype = user
offset = handle
push d,offsetof(struct req, flags)
push d,sizeof(struct req)
push d,current
log 3
exit
offset = prog.c:6
exit
`), 0o644)
	pp := filepath.Join(dir, "p.ppdf")
	mustRun(t, "build", probe, "--symbols", bin, "-o", pp)
	out := mustRun(t, "disasm", pp)
	if want := fmt.Sprintf("offset = handle = %#x", addr("handle")); !strings.Contains(out, want) {
		t.Errorf("disasm lacks %q:\n%s", want, out)
	}
	// the line is inside handle, past its start
	var lineAddr uint64
	if i := strings.Index(out, "offset = prog.c:6 = "); i < 0 {
		t.Errorf("source line not resolved:\n%s", out)
	} else {
		fmt.Sscanf(out[i+len("offset = prog.c:6 = "):], "0x%x", &lineAddr)
		if lineAddr <= addr("handle") || lineAddr >= addr("main") {
			t.Errorf("prog.c:6 at %#x, outside handle (%#x..%#x)", lineAddr, addr("handle"), addr("main"))
		}
	}
	readelf, _ := exec.Command("readelf", "-n", bin).Output()
	if i := strings.Index(string(readelf), "Build ID: "); i < 0 || !strings.Contains(out, "build-id "+strings.Fields(string(readelf)[i+10:])[0]) {
		t.Errorf("build id missing from the PPDF:\n%s", out)
	}
	// sim runs the resolved constants
	h := hits(t, simJSON(t, pp))
	want := fmt.Sprintf("%016x%016x%016x", le(offFlags), le(size), le(addr("current")))
	if h[0]["log"] != want {
		t.Errorf("log %v, want %s", h[0]["log"], want)
	}
	// without the symbols, the same DPDF keeps its symbolic values and sim refuses them
	pp2 := filepath.Join(dir, "p2.ppdf")
	mustRun(t, "build", probe, "-o", pp2)
	if _, errs, code := gprobes(t, "sim", pp2); code == 0 || !strings.Contains(errs, "needs symbols") {
		t.Errorf("sim without symbols: %d %s", code, errs)
	}
	// a misspelt symbol is an error at its position, with a suggestion
	os.WriteFile(probe, []byte("name = prog\nmodtype = user\noffset = handel\nexit\n"), 0o644)
	_, errs, code := gprobes(t, "check", probe, "--symbols", bin)
	if code != 1 || !strings.Contains(errs, probe+":3:10: ") || !strings.Contains(errs, `"handle"`) {
		t.Errorf("misspelt symbol: %d %s", code, errs)
	}
}

// le returns v with its bytes reversed, so %016x prints it little-endian.
func le(v uint64) uint64 {
	var r uint64
	for i := 0; i < 8; i++ {
		r = r<<8 | v&0xff
		v >>= 8
	}
	return r
}
