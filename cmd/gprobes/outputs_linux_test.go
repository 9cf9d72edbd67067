package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/ppdf"
)

// gprobes build -o (and -MF) writes through a character device or a FIFO
// and follows a link, instead of renaming a file over them: as root,
// "build -o /dev/null" replaced /dev/null for the whole machine and said
// it had succeeded. A directory is refused with the reason. The device
// here is a private node like /dev/null (1, 3), so a failure harms
// nothing.
func TestBuildOutputs(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "p.dpdf")
	os.WriteFile(src, []byte("name = a.out\nmodtype = user\noffset = main\npush r,rdi\nlog 1\nexit 1\n"), 0o644)
	out := filepath.Join(dir, "out")
	os.Mkdir(out, 0o755)

	null := filepath.Join(out, "null")
	if err := unix.Mknod(null, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		testkit.SkipOrFail(t, "mknod (needs root, CAP_MKNOD): %v", err)
	}
	mustRun(t, "build", "-o", null, "-MF", null, src)
	if fi, err := os.Lstat(null); err != nil || fi.Mode()&os.ModeCharDevice == 0 || fi.Sys().(*syscall.Stat_t).Rdev != unix.Mkdev(1, 3) {
		t.Errorf("after build -o and -MF, the device is %v (%v)", fi.Mode(), err)
	}

	fifo := filepath.Join(out, "pipe")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			got <- nil
			return
		}
		b, _ := io.ReadAll(f)
		f.Close()
		got <- b
	}()
	mustRun(t, "build", "-o", fifo, src)
	select {
	case b := <-got:
		if m, err := ppdf.Decode(b); err != nil || m.Name != "a.out" {
			t.Errorf("the FIFO's reader got %d bytes: %v", len(b), err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the FIFO's reader got nothing in a minute")
	}
	if fi, _ := os.Lstat(fifo); fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO is now %v", fi.Mode())
	}

	target := filepath.Join(out, "real.ppdf")
	os.WriteFile(target, []byte("old"), 0o600)
	link := filepath.Join(out, "link.ppdf")
	os.Symlink("real.ppdf", link)
	mustRun(t, "build", "-o", link, src)
	if fi, _ := os.Lstat(link); fi.Mode()&os.ModeSymlink == 0 {
		t.Error("the link is no longer a link")
	}
	if b, _ := os.ReadFile(target); !strings.Contains(string(b), "PPDF") {
		t.Errorf("the link's target holds %q", b)
	}

	sub := filepath.Join(out, "sub")
	os.Mkdir(sub, 0o755)
	_, errs, code := gprobes(t, "build", "-o", sub, src)
	if code != 1 || !strings.Contains(errs, sub+": it is a directory") {
		t.Errorf("build -o DIR: exit %d, %q", code, errs)
	}
	ents, _ := os.ReadDir(out)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "link.ppdf null pipe real.ppdf sub" {
		t.Errorf("the folder holds %v", names)
	}
}
