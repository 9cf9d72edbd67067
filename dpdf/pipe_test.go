package dpdf_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/rpn"
)

// A DPDF read from a FIFO (as a shell's <(...) or /dev/stdin gives it) is
// read once: one that needs the preprocessor compiles to what the same
// text in a regular file compiles to, and its errors name the FIFO with
// the right source lines. Before, the preprocessor read the FIFO again,
// found it empty and the file had no name, no modtype and no probes.
func TestOpenFIFO(t *testing.T) {
	testkit.Need(t, "cpp")
	dir := t.TempDir()
	text := "#define N 3\nname = x\nmodtype = user\noffset = 0x10\npush d,N\nlog 1\nexit 1\n"
	regular := filepath.Join(dir, "p.dpdf")
	if err := os.WriteFile(regular, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	// the listing, with the file's name taken out: the module records
	// where its source was
	listing := func(path string) string {
		done := make(chan string, 1)
		go func() {
			r, err := dpdf.Open(path, dpdf.Options{})
			var p *rpn.Program
			if err == nil {
				p, err = compiler.CompileReader(r, rpn.CompileOptions{})
			}
			var b strings.Builder
			if err != nil {
				dpdf.PrintError(&b, err, true)
			} else {
				rpn.Disasm(&b, p.Module())
			}
			done <- strings.ReplaceAll(b.String(), path, "FILE")
		}()
		select {
		case s := <-done:
			return s
		case <-time.After(time.Minute):
			// the preprocessor waits for a second writer: end it
			if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
			t.Fatalf("reading %s did not end in a minute", path)
			return ""
		}
	}
	want := listing(regular)
	if !strings.Contains(want, "push d,3") {
		t.Fatalf("the regular file does not compile: %s", want)
	}
	fifo := func(text string) string {
		p := filepath.Join(dir, "fifo")
		os.Remove(p)
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
		go func() {
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				return
			}
			f.WriteString(text)
			f.Close()
		}()
		return p
	}
	if got := listing(fifo(text)); got != want {
		t.Errorf("from a FIFO:\n%s\nfrom a file:\n%s", got, want)
	}
	// an error's position and source line, in the FIFO's text
	p := fifo(strings.Replace(text, "log 1", "log 1\npush r,rxa", 1))
	r, err := dpdf.Open(p, dpdf.Options{})
	if err == nil {
		_, err = compiler.CompileReader(r, rpn.CompileOptions{})
	}
	var b strings.Builder
	dpdf.PrintError(&b, err, true)
	if w := p + ":7:8: unknown register \"rxa\""; !strings.Contains(b.String(), w) || !strings.Contains(b.String(), "    7 | push r,rxa") {
		t.Errorf("errors from a FIFO:\n%s\nwant %s and its source line", b.String(), w)
	}
}
