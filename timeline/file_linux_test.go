package timeline

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gprobes/gprobes/internal/outfile"
)

// A trace written to a FIFO (a viewer reading a named pipe) goes through
// it whole, in one open: the reader gets every piece and then the end, and
// the FIFO stays one. The file used to be opened again for each piece: the
// reader saw the end of the trace as soon as CreateFile had closed it,
// before the first piece.
func TestFileThroughAFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "trace")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// the reader, non-blocking: a read says EAGAIN while a writer has the
	// FIFO open and nothing is in it, and 0 (the end) once none has
	r, err := syscall.Open(fifo, syscall.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(r)
	buf := make([]byte, 4096)
	f, err := CreateFile(fifo)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := syscall.Read(r, buf); err != syscall.EAGAIN {
		t.Fatalf("after CreateFile the reader reads %d bytes, %v: want EAGAIN, the trace still open", n, err)
	}
	for _, piece := range []string{"one ", "two ", "three"} {
		if err := f.Append([]byte(piece)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for {
		n, err := syscall.Read(r, buf)
		if err != nil {
			t.Fatalf("read: %v after %q", err, got)
		}
		if n == 0 {
			break
		}
		got = append(got, buf[:n]...)
	}
	if string(got) != "one two three" {
		t.Errorf("the reader got %q", got)
	}
	if fi, _ := os.Lstat(fifo); fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO is now %v", fi.Mode())
	}
}

// A link is followed to the file it names, which is truncated and written;
// a directory is refused with what it is.
func TestFileLinksAndRefusals(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	os.WriteFile(target, []byte("an old trace"), 0o644)
	link := filepath.Join(dir, "link")
	os.Symlink("target", link)
	f, err := CreateFile(link)
	if err != nil {
		t.Fatal(err)
	}
	f.Append([]byte("new"))
	f.Close()
	if b, _ := os.ReadFile(target); string(b) != "new" {
		t.Errorf("the target holds %q", b)
	}
	if fi, _ := os.Lstat(link); fi.Mode()&os.ModeSymlink == 0 {
		t.Error("the link is no longer a link")
	}
	if _, err := CreateFile(dir); !errors.Is(err, outfile.Refused) || !strings.Contains(err.Error(), "it is a directory") {
		t.Errorf("a directory: %v", err)
	}
}
