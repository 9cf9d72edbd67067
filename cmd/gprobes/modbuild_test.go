package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/internal/testkit"
)

// A kernel module's pack is bound to its .ko's build ID, not to the
// vmlinux given beside it for types (whatever their order); the kernel
// image's to the vmlinux's; a module given no .ko gets no build ID.
func TestModuleBuildID(t *testing.T) {
	testkit.Tool(t, "ld")
	testkit.Tool(t, "readelf")
	dir := t.TempDir()
	src := filepath.Join(dir, "m.c")
	os.WriteFile(src, []byte("int modfn(int x) { return x + 1; }\nint main(void) { return modfn(0); }\n"), 0o644)
	obj, ko, exe := filepath.Join(dir, "m.o"), filepath.Join(dir, "m.ko"), filepath.Join(dir, "vmlinux")
	for _, c := range [][]string{{"gcc", "-c", "-O1", src, "-o", obj}, {"ld", "-r", "--build-id", "-o", ko, obj}, {"gcc", "-Wl,--build-id", src, "-o", exe}} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
	}
	id := func(path string) string {
		out, err := exec.Command("readelf", "-n", path).Output()
		if err != nil {
			t.Fatal(err)
		}
		_, after, ok := strings.Cut(string(out), "Build ID: ")
		if !ok {
			t.Fatalf("%s has no build ID:\n%s", path, out)
		}
		return strings.Fields(after)[0]
	}
	koID, exeID := id(ko), id(exe)
	for _, c := range []struct {
		name string
		syms []string
		want string
	}{
		{"m", []string{exe, ko}, koID},
		{"m", []string{ko, exe}, koID},
		{"vmlinux", []string{ko, exe}, exeID},
		{"m", []string{exe}, ""},
	} {
		dpdf := filepath.Join(dir, c.name+".dpdf")
		os.WriteFile(dpdf, []byte("name = "+c.name+"\nmodtype = kernel\noffset = modfn\nexit 0\n"), 0o644)
		out := filepath.Join(dir, "out.ppdf")
		args := []string{"build", dpdf, "-o", out}
		for _, s := range c.syms {
			args = append(args, "--symbols", s)
		}
		mustRun(t, args...)
		dis := mustRun(t, "disasm", out)
		got := ""
		if _, after, ok := strings.Cut(dis, "build-id "); ok {
			got = strings.Fields(after)[0]
		}
		if got != c.want {
			t.Errorf("name = %s with %v: build ID %q, want %q\n%s", c.name, c.syms, got, c.want, dis)
		}
	}
}
