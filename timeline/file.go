package timeline

import (
	"fmt"
	"io"
	"os"

	"github.com/gprobes/gprobes/internal/outfile"
)

// File appends whole pieces of a trace (packets) to a file, each with one
// write(2): a piece that does not go in whole (ENOSPC, EIO, a short write)
// is cut off again (ftruncate back to the end of the last whole piece), so
// the file only ever holds whole pieces and a reader of the trace never
// meets a torn one. If even the cut fails, nothing more is written.
//
// The file is opened for each piece and closed after it, so that a trace of
// many threads (a CTF stream file each) holds no descriptor between pieces.
//
// What stands at the path follows internal/outfile's rule: a link is
// followed, a character device or a FIFO (/dev/null, a named pipe a viewer
// reads) is written through, held open until Close (a piece cut short
// there cannot be cut off: nothing more is written after it), and a
// directory, a block device or a socket is refused.
type File struct {
	path   string
	size   int64
	broken error
	stream *os.File // a device or FIFO, written through
}

// CreateFile creates (truncating) the file at path.
func CreateFile(path string) (*File, error) {
	where, _, stream, err := outfile.Where(path)
	if err != nil {
		return nil, err
	}
	if stream {
		f, err := outfile.OpenAppend(path, 0o644)
		if err != nil {
			return nil, err
		}
		return &File{path: path, stream: f}, nil
	}
	f, err := os.OpenFile(where, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return &File{path: where}, nil
}

// Path is the file's path.
func (f *File) Path() string { return f.path }

// Append writes b at the end of the file, whole or not at all.
func (f *File) Append(b []byte) error {
	if f.broken != nil {
		return f.broken
	}
	if f.stream != nil {
		n, err := f.stream.Write(b)
		if err == nil && n != len(b) {
			err = io.ErrShortWrite
		}
		if err != nil && n > 0 {
			f.broken = fmt.Errorf("%w (a partial piece went through to %s, which cannot be cut: nothing more is written)", err, f.path)
		}
		return err
	}
	fd, err := os.OpenFile(f.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	n, err := fd.Write(b)
	if err == nil && n != len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		if n > 0 {
			if terr := fd.Truncate(f.size); terr != nil {
				f.broken = fmt.Errorf("%w (and a partial piece could not be cut off: %v)", err, terr)
			}
		}
		fd.Close()
		return err
	}
	fd.Close() // the bytes are in the file
	f.size += int64(n)
	return nil
}

// Close closes a device or FIFO written through (a FIFO's reader then sees
// the end of the trace); for a file it does nothing.
func (f *File) Close() error {
	if f.stream == nil {
		return nil
	}
	s := f.stream
	f.stream, f.broken = nil, fmt.Errorf("%s: closed", f.path)
	return s.Close()
}
