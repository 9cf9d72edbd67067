package daemon

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// watchName sets changed whenever the directory entry of path may have
// changed (the file renamed, removed, created or replaced), as inotify
// reports it, so that the next write compares the path with the file it
// writes at once instead of up to checkInterval later; a stat(2) on every
// write would cost more than the write. The returned stop ends the watch.
func watchName(path string, changed *atomic.Bool) (stop func(), err error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, err
	}
	const mask = unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE | unix.IN_CREATE | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF
	if _, err := unix.InotifyAddWatch(fd, filepath.Dir(path), mask); err != nil {
		unix.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "inotify") // non-blocking: Close ends a Read under way
	name := filepath.Base(path)
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := f.Read(buf)
			if err != nil {
				return
			}
			for b := buf[:n]; len(b) >= unix.SizeofInotifyEvent; {
				mask := binary.NativeEndian.Uint32(b[4:])
				l := int(binary.NativeEndian.Uint32(b[12:]))
				if unix.SizeofInotifyEvent+l > len(b) {
					break
				}
				ev := b[unix.SizeofInotifyEvent : unix.SizeofInotifyEvent+l]
				if i := indexZero(ev); i >= 0 {
					ev = ev[:i]
				}
				if string(ev) == name || mask&(unix.IN_Q_OVERFLOW|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
					changed.Store(true)
				}
				b = b[unix.SizeofInotifyEvent+l:]
			}
		}
	}()
	return func() { f.Close() }, nil
}

func indexZero(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}
