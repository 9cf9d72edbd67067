package outfile

import (
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/internal/testkit"
)

func ino(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// leftovers fails the test if dir holds a temporary file.
func leftovers(t *testing.T, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary file %s left in %s", e.Name(), dir)
		}
	}
}

// NullDevice makes a character device node like /dev/null (1, 3) at path:
// a private one, so that a test that fails cannot replace the machine's.
func nullDevice(t *testing.T, path string) {
	t.Helper()
	if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		testkit.SkipOrFail(t, "mknod %s (needs root, CAP_MKNOD): %v", path, err)
	}
}

func TestRegularFilesAreReplacedAtomically(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out")
	if err := WriteFile(path, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o600)
	before := ino(t, path)
	if err := WriteFile(path, []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	fi, _ := os.Stat(path)
	if string(b) != "two" || ino(t, path) == before || fi.Mode().Perm() != 0o600 {
		t.Errorf("content %q, same inode %v, mode %v: want two, a new file, the old mode 0600", b, ino(t, path) == before, fi.Mode().Perm())
	}
	leftovers(t, dir)
}

// A link stays a link: the file it names (through a chain of relative and
// absolute links) is replaced; a link to nothing creates that file; a loop
// is an error.
func TestLinksAreFollowed(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	target := filepath.Join(dir, "sub", "target")
	os.WriteFile(target, []byte("old"), 0o644)
	os.Symlink("sub/target", filepath.Join(dir, "rel"))
	os.Symlink(filepath.Join(dir, "rel"), filepath.Join(dir, "abs"))
	if err := WriteFile(filepath.Join(dir, "abs"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"rel", "abs"} {
		if fi, err := os.Lstat(filepath.Join(dir, l)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s is no longer a link: %v", l, err)
		}
	}
	if b, _ := os.ReadFile(target); string(b) != "new" {
		t.Errorf("the target holds %q", b)
	}
	leftovers(t, dir)
	leftovers(t, filepath.Join(dir, "sub"))

	os.Symlink("sub/created", filepath.Join(dir, "dangling"))
	if err := WriteFile(filepath.Join(dir, "dangling"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "sub", "created")); err != nil || string(b) != "x" {
		t.Errorf("a link to nothing: %q %v", b, err)
	}
	os.Symlink("loop2", filepath.Join(dir, "loop1"))
	os.Symlink("loop1", filepath.Join(dir, "loop2"))
	if err := WriteFile(filepath.Join(dir, "loop1"), []byte("x"), 0o644); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("a loop of links: %v", err)
	}
}

// A character device is written through and stays a device: renaming a
// file over it replaced /dev/null for the whole machine when gprobes ran
// as root.
func TestDevicesAreWrittenThrough(t *testing.T) {
	dir := t.TempDir()
	null := filepath.Join(dir, "null")
	nullDevice(t, null)
	link := filepath.Join(dir, "stdout")
	os.Symlink(null, link)
	for _, p := range []string{null, link} {
		if err := WriteFile(p, []byte("gone"), 0o644); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
	fi, err := os.Stat(null)
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 || fi.Sys().(*syscall.Stat_t).Rdev != unix.Mkdev(1, 3) {
		t.Errorf("the device is now %v (%v)", fi.Mode(), err)
	}
	if fi, _ := os.Lstat(link); fi.Mode()&os.ModeSymlink == 0 {
		t.Error("the link to the device is no longer a link")
	}
	f, err := OpenAppend(null, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("more"))
	f.Close()
	leftovers(t, dir)
}

// A FIFO is written through: its reader gets the bytes, and it stays a
// FIFO.
func TestFIFOsAreWrittenThrough(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(f)
		f.Close()
		got <- string(b)
	}()
	if err := WriteFile(fifo, []byte("through the pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if s != "through the pipe" {
			t.Errorf("the reader got %q", s)
		}
	case <-time.After(time.Minute):
		t.Fatal("the reader got nothing in a minute")
	}
	if fi, _ := os.Lstat(fifo); fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO is now %v", fi.Mode())
	}
	leftovers(t, dir)
}

// A directory, a block device and a socket are refused with what they
// are, and nothing is written.
func TestOthersAreRefused(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "dir")
	os.Mkdir(sub, 0o755)
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cases := map[string]string{sub: "a directory", sock: "a socket"}
	// a block device node of an experimental major, which no driver has:
	// nothing to harm if the refusal failed
	blk := filepath.Join(dir, "blk")
	if err := unix.Mknod(blk, unix.S_IFBLK|0o600, int(unix.Mkdev(240, 0))); err == nil {
		cases[blk] = "a block device"
	} else {
		testkit.SkipOrFail(t, "mknod a block device (needs root, CAP_MKNOD): %v", err)
	}
	for path, what := range cases {
		err := WriteFile(path, []byte("x"), 0o644)
		if !errors.Is(err, Refused) || !strings.Contains(err.Error(), "it is "+what) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want a refusal naming the path and saying it is %s", path, err, what)
		}
		if _, err := OpenAppend(path, 0o600); !errors.Is(err, Refused) {
			t.Errorf("OpenAppend %s: %v", path, err)
		}
	}
	if ents, _ := os.ReadDir(sub); len(ents) != 0 {
		t.Errorf("the directory got %v", ents)
	}
	leftovers(t, dir)
}

// CreateNew never replaces what stands at its name, a link included: the
// file it names elsewhere is not created; one that appears meanwhile is
// kept, and the new file dropped.
func TestCreateNewReplacesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "core.1")
	elsewhere := filepath.Join(dir, "elsewhere")
	os.Symlink(elsewhere, path)
	if _, err := CreateNew(path, 0o600); !errors.Is(err, fs.ErrExist) {
		t.Errorf("over a link: %v", err)
	}
	if _, err := os.Lstat(elsewhere); err == nil {
		t.Error("the link's target was created")
	}
	os.Remove(path)
	f, err := CreateNew(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("new"))
	os.WriteFile(path, []byte("someone else's"), 0o644) // appears meanwhile
	if err := f.Commit(); !errors.Is(err, fs.ErrExist) {
		t.Errorf("commit over a file that appeared: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "someone else's" {
		t.Errorf("the file that appeared holds %q", b)
	}
	leftovers(t, dir)
	os.Remove(path)
	f, _ = CreateNew(path, 0o640)
	f.Write([]byte("core"))
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640 exactly", fi.Mode().Perm())
	}
	f, _ = CreateNew(filepath.Join(dir, "aborted"), 0o600)
	f.Abort()
	if _, err := os.Lstat(filepath.Join(dir, "aborted")); err == nil {
		t.Error("an aborted file exists")
	}
	leftovers(t, dir)
}
