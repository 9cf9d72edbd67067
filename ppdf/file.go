package ppdf

import (
	"fmt"
	"io"
	"os"

	"github.com/gprobes/gprobes/internal/outfile"
	"github.com/gprobes/gprobes/rpn"
)

// WriteFile encodes m and writes it to path as a compiler writes its
// output (internal/outfile): a regular file is replaced atomically (the
// bytes go to a new file in the same directory, synced, then renamed over
// it, so a crash or an error leaves the old file or the new one, never a
// half-written PPDF), a symbolic link is followed to the file it names, a
// character device or a FIFO (/dev/null, a pipe) is written through, and
// a directory, a block device or a socket is refused. A new file gets mode
// 0666 minus the umask; a replaced one keeps its mode.
func WriteFile(path string, m *rpn.Module) (err error) {
	return WritePackFile(path, []*rpn.Module{m})
}

// WritePackFile is WriteFile for the builds of a pack (EncodePack).
func WritePackFile(path string, builds []*rpn.Module) (err error) {
	data, err := EncodePack(builds)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return WriteAtomic(path, data)
}

// WriteAtomic writes data to path as WriteFile does.
func WriteAtomic(path string, data []byte) error {
	return outfile.WriteFile(path, data, 0o666) // its errors name path
}

// ReadFile reads and decodes the PPDF at path. Errors name the file. It
// reads at most MaxFileSize+1 bytes, so pointing it at a device or a huge
// file fails instead of exhausting memory. Like Decode, it does not verify
// the bytecode.
func ReadFile(path string) (*rpn.Module, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > MaxFileSize {
		return nil, fmt.Errorf("%s: %w", path, limitf("the file is %d bytes, larger than any PPDF (%d)", fi.Size(), uint64(MaxFileSize)))
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if uint64(len(data)) > MaxFileSize {
		return nil, fmt.Errorf("%s: %w", path, limitf("the file is larger than any PPDF (%d bytes)", uint64(MaxFileSize)))
	}
	m, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}
