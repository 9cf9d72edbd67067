package testkit

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

// fakeT records what a helper asked of its test instead of ending it.
type fakeT struct {
	testing.TB
	skipped, failed string
}

func (f *fakeT) Helper()           {}
func (f *fakeT) Skip(args ...any)  { f.skipped = fmt.Sprint(args...) }
func (f *fakeT) Fatal(args ...any) { f.failed = fmt.Sprint(args...) }

func TestNeedSkipsOrFailsUnderCI(t *testing.T) {
	const tool = "gprobes-no-such-tool"
	t.Setenv("CI", "")
	var f fakeT
	Need(&f, "sh", tool)
	if f.failed != "" || !strings.Contains(f.skipped, tool+" is missing") {
		t.Errorf("without CI: skipped %q, failed %q", f.skipped, f.failed)
	}
	t.Setenv("CI", "true")
	f = fakeT{}
	Need(&f, "sh", tool)
	if f.skipped != "" || !strings.HasPrefix(f.failed, "CI=true: "+tool+" is missing") {
		t.Errorf("under CI=true: skipped %q, failed %q", f.skipped, f.failed)
	}
	f = fakeT{}
	if p := Tool(&f, "sh"); p == "" || f.skipped != "" || f.failed != "" {
		t.Errorf("sh: path %q, skipped %q, failed %q", p, f.skipped, f.failed)
	}
}

func TestCCBuildsOnce(t *testing.T) {
	Need(t, "gcc")
	src := filepath.Join(t.TempDir(), "seven.c")
	if err := os.WriteFile(src, []byte("int main(void) { return 7; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := CC(t, "seven", "-O0", src)
	st, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, []byte("syntax error\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// cached: the broken source is not compiled again
	if b := CC(t, "seven", "-O0", src); b != a {
		t.Errorf("second build at %s, first at %s", b, a)
	}
	if st2, err := os.Stat(a); err != nil || !st2.ModTime().Equal(st.ModTime()) {
		t.Errorf("the fixture was rebuilt: %v", err)
	}
	// other arguments: another build, which fails for every caller
	for i := 0; i < 2; i++ {
		var f fakeT
		if p := CC(&f, "seven", "-O1", src); p != "" || !strings.Contains(f.failed, "syntax error") {
			t.Errorf("call %d of a broken build: path %q, failed %q", i, p, f.failed)
		}
	}
}

func TestSkipShort(t *testing.T) {
	was := testing.Short()
	defer flag.Set("test.short", fmt.Sprint(was))
	flag.Set("test.short", "false")
	var f fakeT
	SkipShort(&f, "boots a VM")
	if f.skipped != "" || f.failed != "" {
		t.Errorf("without -short: skipped %q, failed %q", f.skipped, f.failed)
	}
	flag.Set("test.short", "true")
	SkipShort(&f, "boots a VM")
	if f.skipped != "-short: boots a VM" || f.failed != "" {
		t.Errorf("with -short: skipped %q, failed %q", f.skipped, f.failed)
	}
}
