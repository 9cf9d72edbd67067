// Package outfile writes the files gprobes is told to write (build -o and
// -MF, a pack's signature, run -o, traces, core dumps, recovery journals),
// with one rule for what may already stand at the path:
//
//   - nothing, or a regular file: the new file is written beside it and
//     renamed over it once complete (WriteFile, Create), so a crash or an
//     error leaves the old file or the new one, never half of one. The
//     file replaced keeps its permission bits; a new one gets perm minus
//     the umask.
//   - a symbolic link: followed (to a link, to ..., at most 40), to the
//     file it names, which is written as above; the link stays a link. A
//     link to nothing creates the file it names, as a shell's > does.
//   - a character device or a FIFO (/dev/null, /dev/stdout on a terminal
//     or a pipe, a named pipe): written through, in place, and nothing is
//     renamed over it. Renaming a file over /dev/null replaced it for the
//     whole machine.
//   - anything else (a directory, a block device, a socket): refused with
//     what it is, before anything is opened or written.
//
// CreateNew is for names gprobes picks itself (core dumps): it writes a
// new file and refuses to replace anything that stands at its name, a
// link included, so a link planted in a shared folder sends nothing
// elsewhere.
package outfile

import (
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// maxLinks is how many symbolic links a path may go through (Linux's
// limit for a path lookup).
const maxLinks = 40

// Where says where a write to path goes: the file to create or replace,
// its symbolic links followed, and what stands there now (nil: nothing);
// or, for a character device or a FIFO, path itself, to write through
// (stream). Anything else at path is an error saying what it is.
func Where(path string) (where string, now os.FileInfo, stream bool, err error) {
	fi, err := os.Stat(path) // through the links
	switch {
	case err == nil:
		m := fi.Mode()
		switch {
		case m.IsRegular():
			real, err := filepath.EvalSymlinks(path)
			if err != nil {
				return "", nil, false, err
			}
			return real, fi, false, nil
		case m&os.ModeCharDevice != 0, m&os.ModeNamedPipe != 0:
			return path, fi, true, nil
		}
		return "", nil, false, &fs.PathError{Op: "write", Path: path, Err: refusal(m)}
	case errors.Is(err, fs.ErrNotExist):
		real, err := dangling(path)
		return real, nil, false, err
	}
	return "", nil, false, err
}

// Refused is the error of a path that names something gprobes does not
// write to.
var Refused = errors.New("gprobes writes only to a regular file (new or replaced), a character device or a FIFO")

type refusedError struct{ what string }

func (e refusedError) Error() string { return "it is " + e.what + ": " + Refused.Error() }
func (e refusedError) Unwrap() error { return Refused }

func refusal(m os.FileMode) error {
	what := "not a regular file (" + m.Type().String() + ")"
	switch {
	case m.IsDir():
		what = "a directory"
	case m&os.ModeDevice != 0:
		what = "a block device"
	case m&os.ModeSocket != 0:
		what = "a socket"
	}
	return refusedError{what}
}

// dangling follows the links of a path that names nothing to the name to
// create.
func dangling(path string) (string, error) {
	p := path
	for range maxLinks {
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			return p, nil // nothing there (or it appeared): create or replace p
		}
		link, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(link) {
			link = filepath.Join(filepath.Dir(p), link)
		}
		p = link
	}
	return "", &fs.PathError{Op: "write", Path: path, Err: syscall.ELOOP}
}

// WriteFile writes data to path by the package's rule: to a new file
// renamed over what is there, or through a device or FIFO. Like every
// error of the package, its error names path (not a temporary file).
func WriteFile(path string, data []byte, perm os.FileMode) error {
	f, err := Create(path, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Abort()
		return named("write", path, err)
	}
	return f.Commit()
}

// named makes err name path, the one the caller gave, instead of a
// temporary file or a link's target.
func named(op, path string, err error) error {
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		err = pe.Err
	case errors.As(err, &le):
		err = le.Err
	}
	return &fs.PathError{Op: op, Path: path, Err: err}
}

// OpenAppend opens path to append to (run -o): a regular file (created
// when there is none, its links followed) with O_APPEND, or a device or
// FIFO written through; anything else is refused.
func OpenAppend(path string, perm os.FileMode) (*os.File, error) {
	where, _, stream, err := Where(path)
	if err != nil {
		return nil, named("open", path, err)
	}
	if stream {
		f, err := openStream(path)
		if err != nil {
			return nil, named("open", path, err)
		}
		return f, nil
	}
	f, err := os.OpenFile(where, os.O_WRONLY|os.O_CREATE|os.O_APPEND, perm)
	if err != nil {
		return nil, named("open", path, err)
	}
	return f, nil
}

// OpenStream opens a character device or a FIFO to write to, and checks
// that is what it opened (not a file put at the path meanwhile).
func openStream(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && fi.Mode()&(os.ModeCharDevice|os.ModeNamedPipe) == 0 {
		err = &fs.PathError{Op: "write", Path: path, Err: errors.New("it changed while being opened: no longer a character device or a FIFO")}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// File is an output being written: to a temporary file in the folder of
// the one it replaces, which Commit renames into place, or straight to a
// device or FIFO. Abort (or an error from Commit) leaves nothing.
type File struct {
	f         *os.File
	path      string // what it becomes
	given     string // the path the caller gave, for errors
	tmp       string // the temporary name; "" when written through
	noReplace bool
	done      bool
}

// Create starts writing path by the package's rule.
func Create(path string, perm os.FileMode) (*File, error) {
	where, now, stream, err := Where(path)
	if err != nil {
		return nil, named("write", path, err)
	}
	if stream {
		f, err := openStream(path)
		if err != nil {
			return nil, named("write", path, err)
		}
		return &File{f: f, path: path, given: path}, nil
	}
	mode, keep := perm, false
	if now != nil {
		mode, keep = now.Mode().Perm(), true
	}
	f, err := create(where, mode, keep, false)
	if err != nil {
		return nil, named("write", path, err)
	}
	f.given = path
	return f, nil
}

// CreateNew starts writing a new file at path, a name gprobes chose:
// Commit refuses to replace anything standing there (a link is not
// followed). Its mode is perm exactly (not minus the umask).
func CreateNew(path string, perm os.FileMode) (*File, error) {
	if _, err := os.Lstat(path); err == nil {
		return nil, &fs.PathError{Op: "create", Path: path, Err: fs.ErrExist}
	}
	f, err := create(path, perm, true, true)
	if err != nil {
		return nil, named("create", path, err)
	}
	f.given = path
	return f, nil
}

func create(path string, perm os.FileMode, exact, noReplace bool) (*File, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	var f *os.File
	var err error
	for range 100 {
		tmp := filepath.Join(dir, "."+base+".tmp"+strconv.FormatUint(uint64(rand.Uint32()), 36))
		f, err = os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	if exact {
		if err := f.Chmod(perm); err != nil {
			f.Close()
			os.Remove(f.Name())
			return nil, err
		}
	}
	return &File{f: f, path: path, tmp: f.Name(), noReplace: noReplace}, nil
}

// Write writes to the file.
func (f *File) Write(b []byte) (int, error) {
	n, err := f.f.Write(b)
	if err != nil {
		err = named("write", f.given, err)
	}
	return n, err
}

// OS is the file being written: the temporary file, or the device or
// FIFO (which cannot seek or be truncated).
func (f *File) OS() *os.File { return f.f }

// Stream reports whether the output is a device or FIFO written through.
func (f *File) Stream() bool { return f.tmp == "" }

// Path is where the output goes once committed.
func (f *File) Path() string { return f.path }

// Commit completes the output: the temporary file is synced, closed and
// renamed into place (then the folder synced, where it can be); a device
// or FIFO is closed.
func (f *File) Commit() (err error) {
	if f.done {
		return errors.New("outfile: committed or aborted already")
	}
	f.done = true
	if f.tmp == "" {
		if err := f.f.Close(); err != nil {
			return named("write", f.given, err)
		}
		return nil
	}
	defer func() {
		if err != nil {
			os.Remove(f.tmp)
			err = named("write", f.given, err)
		}
	}()
	if err := f.f.Sync(); err != nil {
		f.f.Close()
		return err
	}
	if err := f.f.Close(); err != nil {
		return err
	}
	if f.noReplace {
		if err := placeNew(f.tmp, f.path); err != nil {
			return err
		}
	} else if err := os.Rename(f.tmp, f.path); err != nil {
		return err
	}
	// make the rename itself durable; some file systems cannot sync a
	// folder, and the file is complete and in place either way
	if d, err := os.Open(filepath.Dir(f.path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// placeNew gives the complete file tmp the name path, which must not
// exist: a hard link fails if anything stands there, atomically.
func placeNew(tmp, path string) error {
	err := os.Link(tmp, path)
	if err == nil {
		os.Remove(tmp)
		return nil
	}
	if errors.Is(err, fs.ErrExist) {
		return &fs.PathError{Op: "create", Path: path, Err: fs.ErrExist}
	}
	// a file system without hard links: check, then rename (a window,
	// where the link cannot close it)
	if _, lerr := os.Lstat(path); lerr == nil {
		return &fs.PathError{Op: "create", Path: path, Err: fs.ErrExist}
	}
	return os.Rename(tmp, path)
}

// Abort drops the output: the temporary file is removed; a device or
// FIFO is closed.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.f.Close()
	if f.tmp != "" {
		os.Remove(f.tmp)
	}
}
