package main

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/symbols"
)

// elfFunctions are the functions readelf -s lists (FUNC and IFUNC
// symbols defined, of .symtab and .dynsym) whose bare names match glob,
// each once.
func elfFunctions(t *testing.T, glob string, file string) []string {
	t.Helper()
	testkit.Need(t, "readelf")
	out, err := exec.Command("readelf", "-sW", file).Output()
	if err != nil {
		t.Fatalf("readelf -s %s: %v", file, err)
	}
	seen := map[string]bool{}
	var names []string
	for _, l := range strings.Split(string(out), "\n") {
		// Num: Value Size Type Bind Vis Ndx Name [(version)]
		f := strings.Fields(l)
		if len(f) < 8 || (f[3] != "FUNC" && f[3] != "IFUNC") || f[6] == "UND" {
			continue
		}
		name, _, _ := strings.Cut(f[7], "@")
		if ok, _ := path.Match(glob, name); ok && !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// list's functions of a file are readelf's (of .symtab and .dynsym), by a
// path and by a library's short name; -v adds the address nm gives and
// the parameters the C source declares.
func TestListFunctions(t *testing.T) {
	hits := buildHits(t)
	plug := testkit.CC(t, "libgpplug.so.1", "-O1", "-g", "-shared", "-fPIC", "../../testdata/proc/plug.c")
	got := strings.Fields(mustRun(t, "list", hits+":*"))
	var want []string
	for _, n := range elfFunctions(t, "*", hits) {
		want = append(want, hits+":"+n)
	}
	if !slices.Equal(got, want) || len(want) < 10 {
		t.Errorf("list %s:*:\n%v\nreadelf -s says:\n%v", hits, got, want)
	}
	libc, _, err := symbols.FindModuleFile("libc", symbols.LDCachePath)
	if err != nil {
		t.Fatal(err)
	}
	got = strings.Fields(mustRun(t, "list", "libc:mall*"))
	want = nil
	for _, n := range elfFunctions(t, "mall*", libc) {
		want = append(want, "libc:"+n)
	}
	if !slices.Equal(got, want) || !slices.Contains(got, "libc:malloc") {
		t.Errorf("list libc:mall*: %v, readelf -s %s says %v", got, libc, want)
	}
	// -v: address (nm's), size, parameters from DWARF
	testkit.Need(t, "nm")
	v := mustRun(t, "list", "-v", plug+":plug")
	nm, _ := exec.Command("nm", "--defined-only", plug).Output()
	var addr string
	for _, l := range strings.Split(string(nm), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[2] == "plug" {
			a, _ := strconv.ParseUint(f[0], 16, 64)
			addr = "0x" + strconv.FormatUint(a, 16)
		}
	}
	if f := strings.Fields(v); len(f) < 4 || f[0] != plug+":plug" || f[1] != addr || !strings.HasSuffix(strings.TrimSpace(v), "(long int i, const char *s)") {
		t.Errorf("list -v %s:plug: %q, want address %s and (long int i, const char *s)", plug, v, addr)
	}
	if _, errs, code := gprobes(t, "list", hits+":nosuch*"); code == 0 || !strings.Contains(errs, "no function of "+hits+" matches") {
		t.Errorf("list of nothing: status %d, %s", code, errs)
	}
}

// list's source lines are lines the line table has code for (objdump's
// decoded lines marked as statements), each at the lowest address
// objdump gives it.
func TestListLines(t *testing.T) {
	hits := buildHits(t)
	testkit.Need(t, "objdump")
	out, err := exec.Command("objdump", "--dwarf=decodedline", hits).Output()
	if err != nil {
		t.Fatal(err)
	}
	lowest := map[int]uint64{}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 4 || f[0] != "hits.c" || f[len(f)-1] != "x" {
			continue
		}
		n, err1 := strconv.Atoi(f[1])
		a, err2 := strconv.ParseUint(strings.TrimPrefix(f[2], "0x"), 16, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		if old, ok := lowest[n]; !ok || a < old {
			lowest[n] = a
		}
	}
	v := mustRun(t, "list", "-v", hits+":hits.c:*")
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(v), "\n") {
		f := strings.Fields(l)
		line, err := strconv.Atoi(strings.TrimPrefix(f[0], hits+":hits.c:"))
		if err != nil || len(f) != 3 {
			t.Fatalf("list -v line %q", l)
		}
		n++
		want, ok := lowest[line]
		if !ok || f[1] != "0x"+strconv.FormatUint(want, 16) {
			t.Errorf("line %d at %s: objdump has it at %#x (%v)", line, f[1], want, ok)
		}
	}
	if n < len(lowest)/2 {
		t.Errorf("%d lines listed of the %d objdump has code for", n, len(lowest))
	}
}

// list's tracepoints are tracefs's events, and -v their fields as the
// format files declare them (the common_ fields left out).
func TestListTracepoints(t *testing.T) {
	dir, err := bpf.EventsDir()
	if err != nil {
		testkit.SkipOrFail(t, "tracefs: %v", err)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "syscalls"))
	var want []string
	for _, e := range ents {
		if ok, _ := path.Match("sys_enter_open*", e.Name()); ok && e.IsDir() {
			want = append(want, "tracepoint:syscalls:"+e.Name())
		}
	}
	if len(want) == 0 {
		testkit.SkipOrFail(t, "no syscalls:sys_enter_open* tracepoints in %s", dir)
	}
	got := strings.Split(strings.TrimSpace(mustRun(t, "list", "tracepoint:syscalls:sys_enter_open*")), "\n")
	if !slices.Equal(got, want) {
		t.Errorf("list: %v\ntracefs: %v", got, want)
	}
	v := mustRun(t, "list", "-v", "tracepoint:syscalls:sys_enter_openat")
	format, err := os.ReadFile(filepath.Join(dir, "syscalls", "sys_enter_openat", "format"))
	if err != nil {
		t.Fatal(err)
	}
	wantV := "tracepoint:syscalls:sys_enter_openat\n"
	for _, l := range strings.Split(string(format), "\n") {
		decl, ok := strings.CutPrefix(strings.TrimSpace(l), "field:")
		decl, _, _ = strings.Cut(decl, ";")
		if ok && !strings.Contains(decl, "common_") {
			wantV += "    " + decl + ";\n"
		}
	}
	if v != wantV {
		t.Errorf("list -v:\n%s\nformat file:\n%s", v, wantV)
	}
}

// list's kernel functions are kallsyms' text symbols; whether a kprobe
// and fentry take them says this host's refusal when it has none.
func TestListKernel(t *testing.T) {
	ks, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		testkit.SkipOrFail(t, "kallsyms: %v", err)
	}
	seen := map[string]bool{}
	var want []string
	for _, l := range strings.Split(string(ks), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || (f[1] != "t" && f[1] != "T") {
			continue
		}
		if ok, _ := path.Match("vfs_*", f[2]); ok && !seen[f[2]] {
			seen[f[2]] = true
			want = append(want, f[2])
		}
	}
	slices.Sort(want)
	v := mustRun(t, "list", "-v", "kernel:vfs_*")
	lines := strings.Split(strings.TrimSpace(v), "\n")
	var got []string
	mech := bpf.Probe()
	for _, l := range lines[1:] {
		name, _, _ := strings.Cut(strings.TrimPrefix(l, "kernel:"), " ")
		got = append(got, name)
		if mech.Kprobe != nil && !strings.Contains(l, "no: "+mech.Kprobe.Error()) {
			t.Errorf("%s: want the kprobe refusal %q", l, mech.Kprobe)
		}
		if mech.Fentry != nil && !strings.Contains(l, "no: "+mech.Fentry.Error()) {
			t.Errorf("%s: want the fentry refusal %q", l, mech.Fentry)
		}
		if mech.Kprobe == nil && !strings.Contains(l, " yes") && !strings.Contains(l, "no: on the kernel's kprobe blacklist") {
			t.Errorf("%s: a kprobe takes it unless blacklisted", l)
		}
	}
	if !slices.Equal(got, want) || len(want) == 0 {
		t.Errorf("list kernel:vfs_*: %v\nkallsyms: %v", got, want)
	}
}

// list --target pid:N looks into what a running process maps: a short
// name is the library it has (readelf's functions of the file its maps
// name), a glob of base names looks in every file it maps.
func TestListProcess(t *testing.T) {
	hits := buildHits(t)
	cmd, lines := startLooping(t, hits)
	lines.Scan()
	pid := cmd.Process.Pid
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	var libc string
	for _, l := range strings.Split(string(maps), "\n") {
		if f := strings.Fields(l); len(f) == 6 && strings.HasPrefix(filepath.Base(f[5]), "libc.so.") {
			libc = f[5]
		}
	}
	var want []string
	for _, n := range elfFunctions(t, "mall*", libc) {
		want = append(want, "libc:"+n)
	}
	target := fmt.Sprintf("pid:%d", pid)
	if got := strings.Fields(mustRun(t, "list", "--target", target, "libc:mall*")); !slices.Equal(got, want) || len(want) == 0 {
		t.Errorf("list --target %s libc:mall*: %v, readelf -s %s: %v", target, got, libc, want)
	}
	if got := strings.TrimSpace(mustRun(t, "list", "--target", target, "*:probed")); got != hits+":probed" {
		t.Errorf("list --target %s '*:probed': %q, want %s:probed", target, got, hits)
	}
	if _, errs, code := gprobes(t, "list", "--target", target, "libnosuch:*"); code == 0 || !strings.Contains(errs, fmt.Sprintf("process %d maps no file libnosuch stands for", pid)) {
		t.Errorf("a library the process does not map: status %d %s", code, errs)
	}
}

// A guest kernel's functions come from its symbol files: list --target
// gdb:... --symbols FILE kernel:GLOB lists the text symbols of FILE (here
// a copy of this machine's kallsyms, a real kernel's symbols, standing
// for a guest's System.map), and -v their addresses; without --symbols it
// says where they come from.
func TestListGuestSymbols(t *testing.T) {
	ks, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		testkit.SkipOrFail(t, "kallsyms: %v", err)
	}
	file := filepath.Join(t.TempDir(), "kallsyms")
	os.WriteFile(file, ks, 0o644)
	addr := map[string]string{}
	var want []string
	for _, l := range strings.Split(string(ks), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || (f[1] != "t" && f[1] != "T") || len(f) > 3 {
			continue // module functions are listed with [module]
		}
		if ok, _ := path.Match("vfs_*", f[2]); ok && addr[f[2]] == "" {
			a, _ := strconv.ParseUint(f[0], 16, 64)
			addr[f[2]] = "0x" + strconv.FormatUint(a, 16)
			want = append(want, "kernel:"+f[2])
		}
	}
	slices.Sort(want)
	got := strings.Fields(mustRun(t, "list", "--target", "gdb:127.0.0.1:1234", "--symbols", file, "kernel:vfs_*"))
	if !slices.Equal(got, want) || len(want) == 0 {
		t.Errorf("list --symbols kallsyms kernel:vfs_*: %v\nthe file: %v", got, want)
	}
	for _, l := range strings.Split(strings.TrimSpace(mustRun(t, "list", "-v", "--symbols", file, "kernel:vfs_*")), "\n") {
		f := strings.Fields(l)
		if name := strings.TrimPrefix(f[0], "kernel:"); len(f) < 2 || f[1] != addr[name] {
			t.Errorf("list -v: %q, the file has %s at %s", l, name, addr[name])
		}
	}
	if _, errs, code := gprobes(t, "list", "--target", "xen:1", "kernel:vfs_*"); code == 0 || !strings.Contains(errs, "give --symbols System.map") {
		t.Errorf("a guest without --symbols: status %d %s", code, errs)
	}
}

// readelfUSDT reads readelf -n's static probe notes of a file: for each
// PROVIDER:NAME, its sites' argument strings and its semaphore.
func readelfUSDT(t *testing.T, file string) (args map[string][]string, sema map[string]string) {
	t.Helper()
	testkit.Need(t, "readelf")
	out, err := exec.Command("readelf", "-n", file).Output()
	if err != nil {
		t.Fatalf("readelf -n %s: %v", file, err)
	}
	args, sema = map[string][]string{}, map[string]string{}
	var prov, name string
	for _, l := range strings.Split(string(out), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "Provider: "):
			prov = strings.TrimPrefix(l, "Provider: ")
		case strings.HasPrefix(l, "Name: "):
			name = strings.TrimPrefix(l, "Name: ")
		case strings.HasPrefix(l, "Location: "):
			_, s, _ := strings.Cut(l, "Semaphore: ")
			v, _ := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
			sema[prov+":"+name] = "-"
			if v != 0 {
				sema[prov+":"+name] = "0x" + strconv.FormatUint(v, 16)
			}
		case strings.HasPrefix(l, "Arguments:"):
			args[prov+":"+name] = append(args[prov+":"+name], strings.TrimSpace(strings.TrimPrefix(l, "Arguments:")))
		}
	}
	return args, sema
}

// list's static probes of a file are readelf -n's stapsdt notes, each
// PROVIDER:NAME once, by path and by a library's short name; -v gives
// each one's sites with the arguments and the semaphore readelf gives.
func TestListUSDT(t *testing.T) {
	testkit.NeedSDT(t)
	exe := testkit.CC(t, "usdtprog", "-O1", "../../kernel/testdata/usdtprog.c", "../../kernel/testdata/usdtguard.c")
	libstd, _, err := symbols.FindModuleFile("libstdc++", symbols.LDCachePath)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, file string }{{exe, exe}, {"libstdc++", libstd}} {
		args, sema := readelfUSDT(t, c.file)
		var want []string
		for pn := range args {
			want = append(want, "usdt:"+c.name+":"+pn)
		}
		slices.Sort(want)
		got := strings.Fields(mustRun(t, "list", "usdt:"+c.name+":*"))
		if !slices.Equal(got, want) || len(want) < 2 {
			t.Errorf("list usdt:%s:*:\n%v\nreadelf -n says:\n%v", c.name, got, want)
		}
		v := mustRun(t, "list", "-v", "usdt:"+c.name+":*")
		for pn, a := range args {
			plural := "s"
			if len(a) == 1 {
				plural = ""
			}
			head := fmt.Sprintf("usdt:%s:%s\n    %d site%s, semaphore %s\n", c.name, pn, len(a), plural, sema[pn])
			i := strings.Index(v, head)
			if i < 0 {
				t.Errorf("list -v usdt:%s:*: no %q in\n%s", c.name, head, v)
				continue
			}
			block := v[i+len(head):]
			if j := strings.Index(block, "usdt:"); j >= 0 {
				block = block[:j]
			}
			var gotArgs []string
			for _, l := range strings.Split(strings.TrimSpace(block), "\n") {
				_, as, _ := strings.Cut(strings.TrimSpace(l), "  ")
				gotArgs = append(gotArgs, as)
			}
			if slices.Sort(gotArgs); !slices.Equal(gotArgs, slices.Sorted(slices.Values(a))) {
				t.Errorf("list -v usdt:%s:%s: arguments %q, readelf -n %q", c.name, pn, gotArgs, a)
			}
		}
	}
	if _, errs, code := gprobes(t, "list", "usdt:"+exe+":nosuch*"); code == 0 || !strings.Contains(errs, "no static probe of "+exe+" matches nosuch*") {
		t.Errorf("list of nothing: status %d, %s", code, errs)
	}
	if _, errs, code := gprobes(t, "list", "usdt:/bin/true:*"); code == 0 || !strings.Contains(errs, "no static probes") {
		t.Errorf("list of a file without notes: status %d, %s", code, errs)
	}
}
