package symbols_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/symbols"
)

// ldconfigP is ldconfig -p's list, the oracle of the cache's reader:
// name and path of each library, in its order.
func ldconfigP(t *testing.T) [][2]string {
	t.Helper()
	testkit.Need(t, "ldconfig")
	out, err := exec.Command("ldconfig", "-p").Output()
	if err != nil {
		t.Fatalf("ldconfig -p: %v", err)
	}
	var libs [][2]string
	for _, l := range strings.Split(string(out), "\n")[1:] {
		name, rest, ok := strings.Cut(strings.TrimSpace(l), " (")
		_, path, ok2 := strings.Cut(rest, ") => ")
		if ok && ok2 {
			libs = append(libs, [2]string{name, path})
		}
	}
	return libs
}

// The loader's cache read by gprobes lists what ldconfig -p lists, in the
// same order.
func TestReadLDCache(t *testing.T) {
	want := ldconfigP(t)
	got, err := symbols.ReadLDCache(symbols.LDCachePath)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || len(want) == 0 {
		t.Fatalf("%d libraries, ldconfig -p lists %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Name != want[i][0] || got[i].Path != want[i][1] {
			t.Errorf("library %d: %s => %s, ldconfig -p says %s => %s", i, got[i].Name, got[i].Path, want[i][0], want[i][1])
		}
	}
	// a cut file is an error, not a panic
	data, _ := os.ReadFile(symbols.LDCachePath)
	for _, n := range []int{0, 10, 40, 60, len(data) / 2} {
		if _, err := symbols.ParseLDCache(data[:n]); err == nil && n < len(data)/2 {
			t.Errorf("a cache cut at %d bytes read without an error", n)
		}
	}
}

// Short names resolve as the loader finds libraries: libc is the
// libc.so.6 ldconfig -p lists; libssl (when installed) is what libssl.so
// links to; a name as a file's base name is that file; a program is found
// in PATH; a name of nothing says where it looked.
func TestFindModuleFile(t *testing.T) {
	libs := ldconfigP(t)
	where := map[string]string{}
	for _, l := range libs {
		if _, ok := where[l[0]]; !ok {
			where[l[0]] = l[1]
		}
	}
	real := func(p string) string {
		r, err := filepath.EvalSymlinks(p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	cases := map[string]string{"libc": real(where["libc.so.6"]), "libc.so.6": where["libc.so.6"]}
	if p, ok := where["libssl.so"]; ok {
		cases["libssl"] = real(p)
	}
	for name, want := range cases {
		got, how, err := symbols.FindModuleFile(name, symbols.LDCachePath)
		if err != nil || got != want || how != "ld.so.cache" {
			t.Errorf("%s: %s (%s, %v), want %s from ld.so.cache", name, got, how, err, want)
		}
	}
	sh, _ := exec.LookPath("sh")
	if got, how, err := symbols.FindModuleFile("sh", symbols.LDCachePath); err != nil || got != sh || how != "PATH" {
		t.Errorf("sh: %s (%s, %v), want %s from PATH", got, how, err, sh)
	}
	// without the cache, the library directories
	if got, how, err := symbols.FindModuleFile("libc", ""); err != nil || got != real(where["libc.so.6"]) || how != "library directory" {
		t.Errorf("libc without the cache: %s (%s, %v)", got, how, err)
	}
	_, _, err := symbols.FindModuleFile("libnosuchthing", symbols.LDCachePath)
	if err == nil || !strings.Contains(err.Error(), "libnosuchthing.so or libnosuchthing.so.VERSION in /etc/ld.so.cache") {
		t.Errorf("libnosuchthing: %v", err)
	}
}

func TestMatchShortName(t *testing.T) {
	for _, c := range []struct {
		base, name string
		ok, exact  bool
	}{
		{"libc.so.6", "libc", true, false},
		{"libc.so.6", "libc.so.6", true, true},
		{"libc.so", "libc", true, false},
		{"libcrypt.so.1", "libc", false, false},
		{"libc-2.36.so", "libc", false, false},
		{"hits", "hits", true, true},
		{"libssl.so.3", "libssl", true, false},
		{"libssl3.so", "libssl", false, false},
		{"libc.so.6", "libc.so", true, false},
		{"libc.so.6", "libc.so.6.1", false, false},
	} {
		if ok, exact := symbols.MatchShortName(c.base, c.name); ok != c.ok || exact != c.exact {
			t.Errorf("%s as %s: %v %v, want %v %v", c.base, c.name, ok, exact, c.ok, c.exact)
		}
	}
}
