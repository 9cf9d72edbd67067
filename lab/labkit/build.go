// Package labkit holds what the project's two labs share: building their
// artifacts once through their build.sh, checking (and in CI installing)
// the host tools, and a QEMU process whose serial port is its stdio, read
// into lines that callers wait on. lab/qemulab (a Linux guest behind QEMU's
// GDB stub) and lab/xenlab (Xen, dom0 and PV domUs) build on it; each keeps
// its own boot, its own command protocol on the serial line and its own
// error prefix.
package labkit

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/gprobes/gprobes/internal/testkit"
)

// Build is one lab's build: build.sh in Dir() prints, last, the folder of
// its artifacts, which must hold Outputs; Tools are the host commands it
// needs with their Debian packages.
type Build struct {
	Name    string        // error prefix: "qemulab", "xenlab"
	Dir     func() string // the folder of build.sh
	Rel     string        // that folder in the repository, for messages
	Outputs []string
	Tools   [][2]string

	mu  sync.Mutex
	art string
}

// SourceDir is the folder of the caller's source file unless env names
// another one: the labs find their build.sh and src/ there.
func SourceDir(env, fallback string) string {
	if d := os.Getenv(env); d != "" {
		return d
	}
	_, file, _, ok := runtime.Caller(1)
	if !ok {
		return fallback
	}
	return filepath.Dir(file)
}

// Artifacts runs build.sh (once per process; build.sh itself caches
// across processes) and returns its output folder.
func (b *Build) Artifacts() (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.art != "" {
		return b.art, nil
	}
	script := filepath.Join(b.Dir(), "build.sh")
	var out, errb bytes.Buffer
	c := exec.Command("bash", script)
	c.Stdout = &out
	c.Stderr = &errb
	if err := c.Run(); err != nil {
		return "", fmt.Errorf("%s: %s: %v\n%s", b.Name, script, err, Tail(errb.String(), 40))
	}
	f := strings.Fields(strings.TrimSpace(out.String()))
	if len(f) == 0 {
		return "", fmt.Errorf("%s: %s printed no output folder\n%s", b.Name, script, Tail(errb.String(), 40))
	}
	dir := f[len(f)-1]
	for _, n := range b.Outputs {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			return "", fmt.Errorf("%s: build output incomplete: %v", b.Name, err)
		}
	}
	b.art = dir
	return dir, nil
}

func (b *Build) missingTools() (cmds, pkgs []string) {
	seen := map[string]bool{}
	for _, t := range b.Tools {
		if _, err := exec.LookPath(t[0]); err != nil {
			cmds = append(cmds, t[0])
			if !seen[t[1]] {
				seen[t[1]] = true
				pkgs = append(pkgs, t[1])
			}
		}
	}
	if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/libc.a"); err != nil {
		cmds = append(cmds, "libc.a")
		pkgs = append(pkgs, "libc6-dev")
	}
	return cmds, pkgs
}

// Available reports whether the lab can run here: nil if QEMU and the
// build tools exist. When they do not and the process is root with
// CI=true or GPROBES_LAB_INSTALL=1, it first installs them (build.sh
// --deps).
func (b *Build) Available() error {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		return fmt.Errorf("%s: needs linux/amd64, have %s/%s", b.Name, runtime.GOOS, runtime.GOARCH)
	}
	cmds, pkgs := b.missingTools()
	if len(cmds) == 0 {
		return nil
	}
	if os.Geteuid() == 0 && (testkit.CI() || os.Getenv("GPROBES_LAB_INSTALL") == "1") {
		out, err := exec.Command("bash", filepath.Join(b.Dir(), "build.sh"), "--deps").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: installing host packages: %v\n%s", b.Name, err, out)
		}
		if cmds, pkgs = b.missingTools(); len(cmds) == 0 {
			return nil
		}
	}
	return fmt.Errorf("%s: missing %s; as root: apt-get install -y --no-install-recommends %s (or %s/build.sh --deps)",
		b.Name, strings.Join(cmds, ", "), strings.Join(pkgs, " "), b.Rel)
}

// Require skips the test when the lab cannot run here, or fails it when
// CI=true (in CI the lab must run). With -short it always skips: the labs
// boot VMs, and go test -short is the fast loop.
func (b *Build) Require(t testing.TB) {
	t.Helper()
	testkit.SkipShort(t, b.Name+": boots a VM")
	if err := b.Available(); err != nil {
		testkit.SkipOrFail(t, "%v", err)
	}
}

// Tail is the last n lines of s, "\r" removed.
func Tail(s string, n int) string {
	s = strings.ReplaceAll(s, "\r", "")
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
