package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// CI reports whether the tests run under CI=true.
func CI() bool { return os.Getenv("CI") == "true" }

// SkipOrFail skips the test with the message, or fails it under CI=true.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if CI() {
		t.Fatal("CI=true: " + msg)
		return
	}
	t.Skip(msg)
}

// Need skips the test (fails it under CI=true) unless every tool is in
// PATH.
func Need(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		Tool(t, tool)
	}
}

// Tool is the path of a tool in PATH; without it the test skips (fails
// under CI=true).
func Tool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		SkipOrFail(t, "%s is missing: %v", name, err)
	}
	return p
}

var fixtures struct {
	mu    sync.Mutex
	dir   string
	built map[string]*fixture
}

type fixture struct {
	once sync.Once
	path string
	err  error
}

// CC builds a C fixture once per test binary: gcc -o DIR/N/name args...,
// run in the test's folder (the package's), DIR a temporary folder that
// Main removes. Later calls with the same name and arguments return the
// same path at once; the build's failure fails every test that asks for
// it. Without gcc the test skips (fails under CI=true).
func CC(t testing.TB, name string, args ...string) string {
	t.Helper()
	Need(t, "gcc")
	key := name + "\x00" + strings.Join(args, "\x00")
	fixtures.mu.Lock()
	if fixtures.built == nil {
		fixtures.built = map[string]*fixture{}
	}
	f := fixtures.built[key]
	if f == nil {
		f = &fixture{}
		fixtures.built[key] = f
	}
	n := len(fixtures.built)
	fixtures.mu.Unlock()
	f.once.Do(func() { f.path, f.err = build(n, name, args) })
	if f.err != nil {
		t.Fatal(f.err)
	}
	return f.path
}

func build(n int, name string, args []string) (string, error) {
	fixtures.mu.Lock()
	if fixtures.dir == "" {
		dir, err := os.MkdirTemp("", "gprobes-fixtures-")
		if err != nil {
			fixtures.mu.Unlock()
			return "", err
		}
		fixtures.dir = dir
	}
	dir := filepath.Join(fixtures.dir, fmt.Sprint(n))
	fixtures.mu.Unlock()
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, name)
	if b, err := exec.Command("gcc", append([]string{"-o", out}, args...)...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the fixture %s: gcc %s: %v\n%s", name, strings.Join(args, " "), err, b)
	}
	return out, nil
}

// Cleanup removes the fixtures CC built.
func Cleanup() {
	fixtures.mu.Lock()
	defer fixtures.mu.Unlock()
	if fixtures.dir != "" {
		os.RemoveAll(fixtures.dir)
		fixtures.dir = ""
		fixtures.built = nil
	}
}

// Main is a TestMain: it runs the tests, removes the fixtures and exits.
func Main(m *testing.M) {
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

// SkipShort skips the test in a -short run (the fast loop), saying
// "-short: why"; the full run (scripts/test) runs it. testsum accepts
// these skips, and only these, in a run it is told had -short.
func SkipShort(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: " + why)
	}
}

// NeedSDT skips the test (fails it under CI=true) unless sys/sdt.h, the
// header USDT test programs compile against, is installed.
func NeedSDT(t testing.TB) {
	t.Helper()
	for _, p := range []string{"/usr/include/x86_64-linux-gnu/sys/sdt.h", "/usr/include/sys/sdt.h"} {
		if _, err := os.Stat(p); err == nil {
			return
		}
	}
	SkipOrFail(t, "sys/sdt.h is not installed (Debian: systemtap-sdt-dev)")
}
