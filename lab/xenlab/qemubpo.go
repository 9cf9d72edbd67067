package xenlab

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/gprobes/gprobes/lab/labkit"
)

// QEMUBinary is a QEMU other than the system's, for Options.QEMU.
type QEMUBinary struct {
	Path    string   // qemu-system-x86_64
	Env     []string // added to its environment
	Args    []string // put before the lab's arguments (-L: its firmware)
	Version string   // the first line of its --version
}

var bpo struct {
	sync.Mutex
	q *QEMUBinary
}

// BackportsQEMU fetches Debian's qemu-system-x86 from bookworm-backports
// (10.0) into a private prefix of the lab's cache, the system's QEMU left
// as it is (qemu-bpo.sh: apt-get download and dpkg-deb -x, nothing built
// or installed; once per process, and cached across processes), and
// returns it for Options.QEMU: the binary, its firmware folders (-L
// usr/share/qemu, usr/share/seabios), its modules folder and, when the
// host lacked some of its libraries, theirs (LD_LIBRARY_PATH).
func BackportsQEMU() (*QEMUBinary, error) {
	bpo.Lock()
	defer bpo.Unlock()
	if bpo.q != nil {
		return bpo.q, nil
	}
	script := filepath.Join(SourceDir(), "qemu-bpo.sh")
	var out, errb bytes.Buffer
	c := exec.Command("bash", script)
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		return nil, fmt.Errorf("xenlab: %s: %v\n%s", script, err, labkit.Tail(errb.String(), 30))
	}
	f := strings.Fields(out.String())
	if len(f) == 0 {
		return nil, fmt.Errorf("xenlab: %s printed no prefix\n%s", script, labkit.Tail(errb.String(), 30))
	}
	root := f[len(f)-1]
	q := &QEMUBinary{Path: filepath.Join(root, "usr/bin/qemu-system-x86_64")}
	for _, d := range []string{"usr/share/qemu", "usr/share/seabios"} {
		d = filepath.Join(root, d)
		if _, err := os.Stat(d); err != nil {
			return nil, fmt.Errorf("xenlab: backports QEMU: %w", err)
		}
		q.Args = append(q.Args, "-L", d)
	}
	if libs, _ := filepath.Glob(filepath.Join(root, "usr/lib/x86_64-linux-gnu/*.so*")); len(libs) > 0 {
		q.Env = append(q.Env, "LD_LIBRARY_PATH="+filepath.Join(root, "usr/lib/x86_64-linux-gnu"))
	}
	q.Env = append(q.Env, "QEMU_MODULE_DIR="+filepath.Join(root, "usr/lib/x86_64-linux-gnu/qemu"))
	v := exec.Command(q.Path, "--version")
	v.Env = append(os.Environ(), q.Env...)
	vout, err := v.Output()
	if err != nil {
		return nil, fmt.Errorf("xenlab: %s --version: %v", q.Path, err)
	}
	q.Version, _, _ = strings.Cut(strings.TrimSpace(string(vout)), "\n")
	bpo.q = q
	return q, nil
}
