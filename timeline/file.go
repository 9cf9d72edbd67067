package timeline

import (
	"fmt"
	"io"
	"os"
)

// File appends whole pieces of a trace (packets) to a file, each with one
// write(2): a piece that does not go in whole (ENOSPC, EIO, a short write)
// is cut off again (ftruncate back to the end of the last whole piece), so
// the file only ever holds whole pieces and a reader of the trace never
// meets a torn one. If even the cut fails, nothing more is written.
//
// The file is opened for each piece and closed after it, so that a trace of
// many threads (a CTF stream file each) holds no descriptor between pieces.
type File struct {
	path   string
	size   int64
	broken error
}

// CreateFile creates (truncating) the file at path.
func CreateFile(path string) (*File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return &File{path: path}, nil
}

// Path is the file's path.
func (f *File) Path() string { return f.path }

// Append writes b at the end of the file, whole or not at all.
func (f *File) Append(b []byte) error {
	if f.broken != nil {
		return f.broken
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
