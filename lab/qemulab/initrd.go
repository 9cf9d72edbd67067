package qemulab

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// File is a file added to the guest's root filesystem at boot (Options.Files).
type File struct {
	Guest string      // absolute path in the guest, e.g. "/bin/gprobes"; parent folders are made
	Host  string      // the host file to copy, or
	Data  []byte      // the contents, when Host is ""
	Mode  os.FileMode // permission bits; 0 means the host file's, or 0644 for Data
}

// The files of Options.Files reach the guest as a second initramfs archive
// that Boot writes into the VM's temporary folder: a copy of the lab's
// initramfs.cpio.gz, zero-padded to 4 bytes, then an uncompressed newc cpio
// of the files. Linux unpacks concatenated archives in order, each
// compressed or not, so the files are added to (or replace) the lab's; the
// cached build is untouched. Uncompressed because it is the quickest: a
// 19 MB static gprobes added 0 to 0.1 s to the boot so, and gzip'd 0.25 s
// more in the guest (TCG) after 0.6 s of gzip on the host (docs/qemu-lab.md).

// writeInitrd writes base (a path) followed by the newc archive of files to dst.
func writeInitrd(dst, base string, files []File) error {
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	in, err := os.Open(base)
	if err != nil {
		return err
	}
	n, err := io.Copy(out, in)
	in.Close()
	if err != nil {
		return err
	}
	// The kernel looks for an uncompressed archive's "070701" at a 4-byte
	// boundary after a compressed one; zeros between archives are skipped.
	if pad := (4 - n%4) % 4; pad > 0 {
		if _, err := out.Write(make([]byte, pad)); err != nil {
			return err
		}
	}
	if err := writeCpio(out, files); err != nil {
		return err
	}
	return out.Close()
}

// writeCpio writes files as a newc ("070701") cpio archive, the parent
// folders of each first, all owned by root.
func writeCpio(w io.Writer, files []File) error {
	dirs := map[string]bool{}
	seen := map[string]bool{}
	for _, f := range files {
		g := f.Guest
		if !path.IsAbs(g) || path.Clean(g) != g || g == "/" {
			return fmt.Errorf("qemulab: File.Guest %q: want a clean absolute path", g)
		}
		if seen[g] {
			return fmt.Errorf("qemulab: File.Guest %q given twice", g)
		}
		seen[g] = true
		if f.Host == "" && f.Data == nil {
			return fmt.Errorf("qemulab: File %q: neither Host nor Data", g)
		}
		for d := path.Dir(g); d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	for g := range seen {
		if dirs[g] {
			return fmt.Errorf("qemulab: File.Guest %q is also a folder of another file", g)
		}
	}
	var dl []string
	for d := range dirs {
		dl = append(dl, d)
	}
	sort.Strings(dl) // parents before children
	cw := &cpioWriter{w: w, ino: 1, mtime: time.Now().Unix()}
	for _, d := range dl {
		if err := cw.header(strings.TrimPrefix(d, "/"), 0o040755, 2, 0); err != nil {
			return err
		}
	}
	for _, f := range files {
		name := strings.TrimPrefix(f.Guest, "/")
		if f.Host == "" {
			mode := f.Mode.Perm()
			if mode == 0 {
				mode = 0o644
			}
			if err := cw.header(name, 0o100000|uint32(mode), 1, int64(len(f.Data))); err != nil {
				return err
			}
			if err := cw.data(bytes.NewReader(f.Data), int64(len(f.Data))); err != nil {
				return err
			}
			continue
		}
		in, err := os.Open(f.Host)
		if err != nil {
			return fmt.Errorf("qemulab: %w", err)
		}
		st, err := in.Stat()
		if err != nil || !st.Mode().IsRegular() {
			in.Close()
			return fmt.Errorf("qemulab: File.Host %s: not a regular file (%v)", f.Host, err)
		}
		mode := f.Mode.Perm()
		if mode == 0 {
			mode = st.Mode().Perm()
		}
		err = cw.header(name, 0o100000|uint32(mode), 1, st.Size())
		if err == nil {
			err = cw.data(in, st.Size())
		}
		in.Close()
		if err != nil {
			return err
		}
	}
	return cw.header("TRAILER!!!", 0, 1, 0)
}

type cpioWriter struct {
	w     io.Writer
	off   int64
	ino   uint32
	mtime int64
}

func (c *cpioWriter) write(b []byte) error {
	n, err := c.w.Write(b)
	c.off += int64(n)
	return err
}

func (c *cpioWriter) pad() error {
	if p := (4 - c.off%4) % 4; p > 0 {
		return c.write(make([]byte, p))
	}
	return nil
}

func (c *cpioWriter) header(name string, mode, nlink uint32, size int64) error {
	if size > 0xffffffff {
		return fmt.Errorf("qemulab: %s: larger than 4 GiB", name)
	}
	ino := c.ino
	c.ino++
	if name == "TRAILER!!!" {
		ino = 0
	}
	// magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor,
	// devminor, rdevmajor, rdevminor, namesize (with its NUL), check
	h := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, mode, 0, 0, nlink, uint32(c.mtime), uint32(size), 0, 0, 0, 0, len(name)+1, 0)
	if err := c.write([]byte(h + name + "\x00")); err != nil {
		return err
	}
	return c.pad()
}

func (c *cpioWriter) data(r io.Reader, size int64) error {
	n, err := io.Copy(writerFunc(c.write), io.LimitReader(r, size))
	if err != nil {
		return err
	}
	if n != size {
		return fmt.Errorf("qemulab: short file: %d of %d bytes", n, size)
	}
	return c.pad()
}

type writerFunc func([]byte) error

func (f writerFunc) Write(b []byte) (int, error) {
	if err := f(b); err != nil {
		return 0, err
	}
	return len(b), nil
}

// BuildStatic builds the Go command pkg (an import path, e.g.
// "github.com/gprobes/gprobes/cmd/gprobes") into the file dst as a
// statically linked binary for the guest (CGO_ENABLED=0 GOOS=linux
// GOARCH=amd64, -trimpath), and checks that it is static: no program
// interpreter, no shared libraries. Go's build cache makes a second build
// of an unchanged package take about a second.
func BuildStatic(pkg, dst string) error {
	abs, err := filepath.Abs(dst)
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-trimpath", "-o", abs, pkg)
	cmd.Dir = SourceDir() // inside the module
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("qemulab: go build %s: %v\n%s", pkg, err, out)
	}
	return CheckStatic(abs)
}

// CheckStatic reports an error unless the ELF file bin is an x86-64
// executable that needs no dynamic loader or shared library (the guest has
// none).
func CheckStatic(bin string) error {
	f, err := elf.Open(bin)
	if err != nil {
		return fmt.Errorf("qemulab: %w", err)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 {
		return fmt.Errorf("qemulab: %s is %v, not x86-64", bin, f.Machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("qemulab: %s is dynamically linked (has an interpreter; build with CGO_ENABLED=0)", bin)
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return fmt.Errorf("qemulab: %s: %w", bin, err)
	}
	if len(libs) > 0 {
		return fmt.Errorf("qemulab: %s needs shared libraries %v", bin, libs)
	}
	return nil
}
