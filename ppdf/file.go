package ppdf

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"github.com/gprobes/gprobes/rpn"
)

// WriteFile encodes m and writes it to path atomically: the bytes go to a
// new file in the same directory, are synced to disk, and only then is that
// file renamed over path. A crash or an error leaves either the old file or
// the new one, never a half-written PPDF. The file is created with mode
// 0666 minus the umask, like a compiler's output.
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

// WriteAtomic writes data to path as WriteFile does: to a new file in
// the same directory, synced, then renamed over path.
func WriteAtomic(path string, data []byte) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	var f *os.File
	for range 100 {
		tmp := filepath.Join(dir, "."+base+".tmp"+strconv.FormatUint(uint64(rand.Uint32()), 36))
		f, err = os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
		if !errors.Is(err, os.ErrExist) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
			err = fmt.Errorf("write %s: %w", path, err)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	// Make the rename itself durable. Some file systems cannot sync a
	// directory; the file is complete and in place either way.
	if d, derr := os.Open(dir); derr == nil {
		d.Sync()
		d.Close()
	}
	return nil
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
