package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
)

// The log file can be renamed, removed or cut under the daemon: logrotate
// renames it and creates a new one (its create mode), removes old ones, or
// copies it and truncates it (copytruncate); a person removes it to free
// space. The writer notices (checkFile: the path no longer names the file
// it writes, or the file got shorter than what it wrote), starts a new
// generation in the file now at the path (creating it if there is none),
// and keeps, for every generation, the file's identity and how many
// records went into it. A reader finds each generation by identity, not by
// name, and says how many records it could not read and why, instead of
// printing nothing.

// fileIDOf is the identity of a file (fileID: limits.go).
func fileIDOf(fi os.FileInfo) fileID {
	if fi == nil {
		return fileID{}
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fileID{uint64(st.Dev), uint64(st.Ino)}
	}
	return fileID{}
}

// links is the number of names a file has: 0 once it is removed.
func links(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}

// awayKind is what was done to a log file under the daemon.
type awayKind uint8

const (
	inChain     awayKind = iota // a file the daemon rotates itself: log.bin, then .1, .2 ...
	renamedAway                 // renamed under the daemon: readable under its new name, which gprobes finds only if it is log.bin.N
	removedAway                 // removed under the daemon
	cutAway                     // its records cut out of the file under the daemon (copytruncate copies them first)
)

var awayNames = [...]string{inChain: "", renamedAway: "renamed", removedAway: "removed", cutAway: "cut"}

// generation is one file of the log: the current one, or an older one.
type generation struct {
	n       uint64   // the writer's gen while it was current
	id      fileID   // its file; zero once its records are cut out of it
	records uint64   // whole records in it (those of earlier runs included)
	away    awayKind // what was done to it under the daemon
}

// maxGenerations is how many generations the writer remembers beyond
// --log-keep; the records of older ones moved away under the daemon are
// summed in LogWriter.dropped.
const maxGenerations = 64

// checkInterval is how often, at most, a write compares the path with
// the file it writes to (a stat(2)); readers and the once-a-second sync
// compare too.
const checkInterval = 100 * time.Millisecond

// newGeneration makes the writer's current file (w.f, w.id) generation
// w.gen, holding records records. Called with w.mu held.
func (w *LogWriter) newGeneration(records uint64) {
	w.gens = append(w.gens, generation{n: w.gen, id: w.id, records: records})
	if keep := w.opts.Keep + 1 + maxGenerations; len(w.gens) > keep {
		for _, g := range w.gens[:len(w.gens)-keep] {
			if g.away != inChain {
				w.dropped[g.away] += g.records
			}
		}
		w.gens = append(w.gens[:0], w.gens[len(w.gens)-keep:]...)
	}
}

// current is the generation being written. Called with w.mu held.
func (w *LogWriter) current() *generation { return &w.gens[len(w.gens)-1] }

// generation returns generation n, if the writer remembers it. Called with
// w.mu held.
func (w *LogWriter) generation(n uint64) (generation, bool) {
	if len(w.gens) == 0 || n < w.gens[0].n || n > w.gen {
		return generation{}, false
	}
	return w.gens[n-w.gens[0].n], true
}

// checkFile compares the file at the path with the one the writer writes
// to and starts a new generation when it was renamed or removed (in the
// file now at the path, created if there is none) or cut shorter than
// what was written. It returns what to tell the user, if anything. Called
// with w.mu held.
func (w *LogWriter) checkFile() string {
	w.checked = time.Now()
	if w.f == nil {
		return "" // the next write opens the path
	}
	fi, err := os.Stat(w.path)
	if err == nil && fileIDOf(fi) == w.id {
		if fi.Size() >= w.size {
			return ""
		}
		// cut under us: what was in it is gone from it (copytruncate
		// copied it first); what is left starts a new generation
		cut := w.current()
		// the frames left are records written since the cut (the file is
		// appended to): they start the new generation, in a file given its
		// header again
		size, left, _, err := reheader(w.f)
		if err != nil {
			size = fi.Size()
		}
		cut.records -= min(left, cut.records)
		records := cut.records
		cut.away, cut.id = cutAway, fileID{}
		w.size, w.torn = size, false
		w.gen++
		w.replaced++
		w.newGeneration(left)
		return fmt.Sprintf("the log file %s was cut to %d bytes under the daemon (logrotate's copytruncate?): %s written to it are no longer in it; writing on", w.path, fi.Size(), plural(records, "record"))
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "" // cannot tell: keep writing where we are
	}
	how := renamedAway
	if st, err := w.f.Stat(); err == nil && links(st) == 0 {
		how = removedAway
	}
	nf, size, inNew, torn, err := openLogFile(w.path)
	if err != nil {
		msg := fmt.Sprintf("the log file %s was %s under the daemon and no new one can be opened (%v): records go on into the %s file", w.path, awayNames[how], err, awayNames[how])
		if msg == w.checkErr {
			return ""
		}
		w.checkErr = msg
		return msg
	}
	w.checkErr = ""
	old := w.current()
	old.away = how
	records := old.records
	prev := w.f
	w.f, w.size, w.torn, w.dirty = nf, size, false, false
	w.id = fileIDOf(mustStat(nf))
	w.gen++
	w.replaced++
	w.newGeneration(inNew)
	go func() { prev.Sync(); prev.Close() }()
	if torn != "" {
		defer w.warn(torn)
	}
	if how == removedAway {
		return fmt.Sprintf("the log file %s was removed under the daemon: writing a new one; the %s in the removed file can no longer be read", w.path, plural(records, "record"))
	}
	return fmt.Sprintf("the log file %s was renamed under the daemon (logrotate?): writing a new one; the %s written before are in the renamed file", w.path, plural(records, "record"))
}

// openLogFile opens (creating) a log file: a regular file, given its
// header if it is empty, its torn tail cut off (torn says so); size is
// what is left, records the records in it.
func openLogFile(path string) (f *os.File, size int64, records uint64, torn string, err error) {
	f, err = os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, 0, 0, "", err
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file (%s): the log is a file the daemon writes, reads back, truncates and rotates", path, st.Mode().Type())
	}
	if err == nil {
		size, records, torn, err = wholeFrames(f)
		if errors.Is(err, errNotBinaryLog) {
			err = fmt.Errorf("%s is not a gprobes binary log (it does not start with \\x89gprobes): move it away; the daemon does not write over a file it did not make", path)
		}
	}
	if err != nil {
		f.Close()
		return nil, 0, 0, "", err
	}
	return f, size, records, torn, nil
}

// reheader makes f, cut under the daemon and appended to since, a log
// file again: its header first (the frames written after the cut moved
// behind it), its torn tail cut off.
func reheader(f logFile) (size int64, records uint64, torn string, err error) {
	st, err := f.Stat()
	if err != nil {
		return 0, 0, "", err
	}
	if st.Size() > 0 && st.Size() <= maxFrame {
		b := make([]byte, st.Size())
		if _, err := f.ReadAt(b, 0); err != nil {
			return 0, 0, "", err
		}
		if !bytes.HasPrefix(b, logMagic[:]) {
			if err := f.Truncate(0); err != nil {
				return 0, 0, "", err
			}
			if _, err := f.Write(append(fileHeader(), b...)); err != nil {
				return 0, 0, "", err
			}
		}
	}
	return wholeFrames(f)
}

func mustStat(f *os.File) os.FileInfo {
	st, err := f.Stat()
	if err != nil {
		return nil
	}
	return st
}

// openGeneration opens generation g's file for reading: the writer's own
// file for the current one, else the file among log.bin, .1 ... .Keep
// that is g's (by identity: a name may hold another generation's file, or
// another file; an identity a later generation also has is the later
// one's, the inode number having been reused). Nil when none is. Called
// with w.mu held.
func (w *LogWriter) openGeneration(g generation) *os.File {
	if g.id == (fileID{}) {
		return nil
	}
	if !w.latest(g) {
		return nil
	}
	if g.n == w.gen && w.f != nil {
		if fd, ok := w.f.(interface{ Fd() uintptr }); ok {
			if nfd, err := syscall.Dup(int(fd.Fd())); err == nil {
				syscall.CloseOnExec(nfd)
				return os.NewFile(uintptr(nfd), w.path)
			}
		}
	}
	for k := 0; k <= w.opts.Keep; k++ {
		f, err := os.Open(w.rotated(k))
		if err != nil {
			continue
		}
		if st, err := f.Stat(); err == nil && fileIDOf(st) == g.id {
			return f
		}
		f.Close()
	}
	return nil
}

// latest reports whether no later generation has g's identity: if one
// has, g's file was freed and its inode number given to the later one's,
// and g's file is gone. Called with w.mu held.
func (w *LogWriter) latest(g generation) bool {
	for _, later := range w.gens {
		if later.n > g.n && later.id == g.id {
			return false
		}
	}
	return true
}

// awayCounts are the records a reader could not read because their file
// was renamed, removed or cut under the daemon, by awayKind.
type awayCounts [4]uint64

// copyLinesN is copyLines that also counts the lines copied.
func copyLinesN(out io.Writer, f *os.File, pos, limit int64, lines *uint64) (int64, error) {
	return copyLines(countingWriter{out, lines}, f, pos, limit)
}

type countingWriter struct {
	w io.Writer
	n *uint64
}

// Write is given one whole line at a time (copyLines).
func (c countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	if err == nil {
		*c.n++
	}
	return n, err
}
