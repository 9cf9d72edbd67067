package coredump

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"time"
	"unsafe"

	"github.com/gprobes/gprobes/internal/outfile"
)

// Thread is one thread's state at the time of the dump.
type Thread struct {
	TID    int
	Regs   Regs   // linux/amd64 user_regs_struct as PTRACE_GETREGS returns it
	FPRegs []byte // optional: 512-byte FXSAVE area (PTRACE_GETFPREGS); nil if unknown
	// Signal is the pending/current signal to report (0 for none). A
	// thread with Signal 0 reports the signal of Threads[0] in its
	// NT_PRSTATUS, as the kernel writes the dump's signal in every
	// thread's note (gdb takes the one of the last note for its "Program
	// terminated with signal" line).
	Signal int
	// Siginfo is optional: the thread's siginfo_t (at most 128 bytes) as
	// PTRACE_GETSIGINFO returns it. For Threads[0] it becomes NT_SIGINFO;
	// without it NT_SIGINFO carries only si_signo = Signal (and is left
	// out when Signal is 0).
	Siginfo []byte
}

// Process describes what to dump. The caller (the engine's ptrace loop)
// stops the process and gathers Threads with ptrace from its own tracer
// thread; everything else the package reads itself.
type Process struct {
	PID     int
	Threads []Thread    // Threads[0] is the thread that hit the probe: it becomes the first NT_PRSTATUS
	Mem     io.ReaderAt // the process's memory, e.g. an *os.File of /proc/PID/mem opened by the tracer; reads of unreadable ranges return errors
}

// Options limits a dump. The zero value dumps every mapping, like gcore.
type Options struct {
	// MaxBytes refuses, before anything is written, a dump whose file
	// would be larger. 0 means no limit.
	MaxBytes int64
	// SkipFileBackedReadOnly leaves out the contents of read-only
	// mappings of files that are still on disk (shared libraries' and
	// the executable's text and constants), as the kernel does when bit 2
	// (and 3) of coredump_filter is clear: a debugger reads them from the
	// files named in NT_FILE. The first page of a mapping that starts
	// with an ELF header is kept (coredump_filter bit 4), so build IDs
	// stay in the core. Mappings with pages copied on write (smaps
	// "Anonymous:" not 0, such as relocated data made read-only, which
	// holds the dynamic section and so the list of shared libraries),
	// deleted files and memfds are always dumped; without smaps the
	// option leaves everything in.
	SkipFileBackedReadOnly bool
	// IncludeDontDump also dumps mappings marked MADV_DONTDUMP (the "dd"
	// VmFlag), which are otherwise written with p_filesz 0, as the kernel
	// and gcore do.
	IncludeDontDump bool
}

// Region is a range of the process's address space that a Stats reports.
type Region struct {
	Start, End uint64
	Perms      string // "r-xp" as in /proc/PID/maps
	Path       string // as in /proc/PID/maps ("" for anonymous memory)
	Reason     string
}

func (r Region) String() string {
	return fmt.Sprintf("%#x-%#x %s %s: %s", r.Start, r.End, r.Perms, r.Path, r.Reason)
}

// Stats describes a dump that was written (or, after an error, planned).
type Stats struct {
	Size        int64 // bytes of the core file
	Threads     int   // NT_PRSTATUS notes
	Segments    int   // PT_LOAD program headers: one per mapping
	MemoryBytes int64 // bytes of memory in the PT_LOAD segments
	// Omitted lists the mappings whose contents are not in the core, in
	// whole (p_filesz 0) or but for their first page, and why: no read
	// permission, I/O or PFN mappings ([vvar]), MADV_DONTDUMP, the
	// Options filter, or a failed read of their first bytes.
	Omitted []Region
	// ZeroFilled lists pages inside dumped mappings that could not be
	// read (a file mapping past the end of its file); the core holds
	// zeros there.
	ZeroFilled []Region
	// MissingTIDs lists threads of the process that were not in
	// Process.Threads: their registers are not in the core.
	MissingTIDs []int
	Duration    time.Duration
}

// ErrGone is returned (wrapped) when the process disappears before or
// during the dump: it exited or was killed.
var ErrGone = errors.New("the process is gone (exited or killed)")

const chunkSize = 1 << 20

// ELF constants of an x86_64 core.
const (
	ehdrSize  = 64
	phdrSize  = 56
	shdrSize  = 64
	ptLoad    = 1
	ptNote    = 4
	pfX       = 1
	pfW       = 2
	pfR       = 4
	etCore    = 4
	emX86_64  = 62
	pnXNum    = 0xffff
	elfClass  = 2 // ELFCLASS64
	elfClass3 = 1 // ELFCLASS32
)

// segment is the plan of one PT_LOAD.
type segment struct {
	m      *mapping
	offset uint64
	filesz uint64
}

// Write writes an ELF64 core file of p to w: a PT_NOTE segment with
// NT_PRSTATUS per thread (Threads[0] first), NT_PRPSINFO, NT_SIGINFO (for
// Threads[0], when it has a signal), NT_AUXV, NT_FILE and NT_FPREGSET per
// thread that has FPRegs; then one PT_LOAD per mapping of /proc/PID/maps,
// with its permissions and its contents read from p.Mem. Mappings that
// cannot be read get p_filesz 0 and are listed in Stats.Omitted. The
// layout is computed before the first byte is written, and w is written
// sequentially; memory is copied in chunks of at most 1 MiB. When w is a
// regular *os.File, pages of zeros are skipped with forward seeks
// (holes) instead of written.
//
// The caller must keep every thread of the process stopped from before it
// gathers Threads until Write returns.
func Write(w io.Writer, p *Process, opts Options) (Stats, error) {
	start := time.Now()
	var st Stats
	if runtime.GOOS != "linux" {
		return st, ErrNotSupported
	}
	if runtime.GOARCH != "amd64" || unsafe.Sizeof(Regs{}) != regsSize {
		return st, fmt.Errorf("coredump: built for %s: cores are written by linux/amd64 builds only", runtime.GOARCH)
	}
	if p == nil || p.PID <= 0 {
		return st, errors.New("coredump: no process")
	}
	if len(p.Threads) == 0 {
		return st, fmt.Errorf("coredump: process %d: no threads given", p.PID)
	}
	if p.Mem == nil {
		return st, fmt.Errorf("coredump: process %d: no memory reader", p.PID)
	}
	if opts.MaxBytes < 0 {
		return st, fmt.Errorf("coredump: negative MaxBytes %d", opts.MaxBytes)
	}
	proc := fmt.Sprintf("/proc/%d", p.PID)
	status, err := readStatus(proc + "/status")
	if errors.Is(err, fs.ErrNotExist) {
		return st, fmt.Errorf("coredump: process %d: %w: %w", p.PID, ErrGone, err)
	}
	if err != nil {
		return st, fmt.Errorf("coredump: process %d: %w", p.PID, err)
	}
	if tgid := status["Tgid"]; tgid != strconv.Itoa(p.PID) {
		return st, fmt.Errorf("coredump: %d is a thread of process %s, not a process", p.PID, tgid)
	}
	if exeClass(p.PID) == elfClass3 {
		return st, fmt.Errorf("coredump: process %d is a 32-bit program: only x86_64 processes are dumped", p.PID)
	}
	ps, err := readStat(proc + "/stat")
	if err != nil {
		return st, fmt.Errorf("coredump: process %d: %w", p.PID, err)
	}
	tids, err := taskIDs(p.PID)
	if err != nil {
		return st, fmt.Errorf("coredump: process %d: %w", p.PID, err)
	}
	given := map[int]bool{}
	for _, th := range p.Threads {
		if given[th.TID] {
			return st, fmt.Errorf("coredump: process %d: thread %d given twice", p.PID, th.TID)
		}
		if !slices.Contains(tids, th.TID) {
			return st, fmt.Errorf("coredump: process %d has no thread %d (it exited?)", p.PID, th.TID)
		}
		given[th.TID] = true
	}
	for _, tid := range tids {
		if !given[tid] {
			st.MissingTIDs = append(st.MissingTIDs, tid)
		}
	}
	st.Threads = len(p.Threads)

	// The memory map, auxv and mem are the same for every thread; take
	// them through the first thread, which is alive even when the leader
	// has exited with pthread_exit (its own maps are then empty).
	taskDir := fmt.Sprintf("%s/task/%d", proc, p.Threads[0].TID)
	maps, err := readMaps(taskDir)
	if err != nil {
		return st, fmt.Errorf("coredump: %w", err)
	}
	if len(maps) == 0 {
		return st, fmt.Errorf("coredump: process %d has no memory mappings: %w", p.PID, ErrGone)
	}
	pageSize := uint64(os.Getpagesize())
	notes, err := buildNotes(p, taskDir, ps, status, maps, pageSize)
	if err != nil {
		return st, fmt.Errorf("coredump: %w", err)
	}

	segs, err := plan(maps, p.Mem, opts, pageSize, &st)
	if err != nil {
		st.Duration = time.Since(start)
		return st, fmt.Errorf("coredump: process %d: %w", p.PID, err)
	}
	phnum := 1 + len(segs)
	headers := uint64(ehdrSize + phdrSize*phnum)
	if phnum >= pnXNum {
		headers += shdrSize
	}
	off := alignUp(headers+uint64(len(notes)), pageSize)
	for i := range segs {
		segs[i].offset = off
		off += segs[i].filesz
		st.MemoryBytes += int64(segs[i].filesz)
	}
	st.Size = int64(off)
	st.Segments = len(segs)
	if opts.MaxBytes > 0 && st.Size > opts.MaxBytes {
		st.Duration = time.Since(start)
		return st, fmt.Errorf("coredump: process %d: the dump would take %d bytes, more than the limit of %d", p.PID, st.Size, opts.MaxBytes)
	}

	o := newOut(w)
	err = emit(o, p.Mem, notes, segs, phnum, headers, &st)
	if err == nil {
		err = o.finish()
	}
	st.Duration = time.Since(start)
	if err != nil {
		return st, fmt.Errorf("coredump: process %d: %w", p.PID, err)
	}
	if o.n != st.Size {
		return st, fmt.Errorf("coredump: process %d: wrote %d bytes, planned %d", p.PID, o.n, st.Size)
	}
	return st, nil
}

func alignUp(v, a uint64) uint64 { return (v + a - 1) &^ (a - 1) }

// plan decides what each mapping's PT_LOAD holds. It reads the first bytes
// of every mapping it means to dump, so that a mapping the kernel refuses
// to read ([vvar] without smaps, device memory) is known before the
// headers are written.
func plan(maps []mapping, mem io.ReaderAt, opts Options, pageSize uint64, st *Stats) ([]segment, error) {
	segs := make([]segment, len(maps))
	var probe [4]byte
	for i := range maps {
		m := &maps[i]
		segs[i].m = m
		size := m.end - m.start
		omit := func(reason string) {
			st.Omitted = append(st.Omitted, Region{m.start, m.end, m.perms, m.path, reason})
		}
		switch {
		case !m.readable():
			omit("no read permission")
			continue
		case m.start >= 1<<63:
			omit("above 2^63, out of reach of a file offset")
			continue
		case m.flags["io"] || m.flags["pf"]:
			omit("I/O or PFN mapping")
			continue
		case m.flags["dd"] && !opts.IncludeDontDump:
			omit("MADV_DONTDUMP")
			continue
		}
		n, err := mem.ReadAt(probe[:], int64(m.start))
		if n < len(probe) {
			if gone(err) {
				return nil, fmt.Errorf("reading %#x: %w", m.start, ErrGone)
			}
			omit("unreadable: " + errText(err))
			continue
		}
		if opts.SkipFileBackedReadOnly && !m.writable() && m.rereadable() {
			if m.offset == 0 && string(probe[:]) == "\x7fELF" {
				segs[i].filesz = pageSize
				omit("file-backed read-only: only the ELF header page")
			} else {
				omit("file-backed read-only")
			}
			continue
		}
		segs[i].filesz = size
	}
	return segs, nil
}

// errText is the cause of a read error without the file name around it.
func errText(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// out is the core's byte stream: buffered writes to the destination,
// and, when that is a regular file, pages of zeros left as holes (a
// relative seek) instead of written, as the kernel does for its cores.
type out struct {
	bw   *bufio.Writer
	sink sink
	n    int64 // bytes of the core so far, holes included
}

type sink struct {
	w    io.Writer
	f    *os.File // non-nil when holes can be made
	hole int64    // pending hole, made before the next write
}

func (s *sink) Write(b []byte) (int, error) {
	if s.hole > 0 {
		if _, err := s.f.Seek(s.hole, io.SeekCurrent); err != nil {
			return 0, err
		}
		s.hole = 0
	}
	return s.w.Write(b)
}

func newOut(w io.Writer) *out {
	o := &out{sink: sink{w: w}}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			o.sink.f = f
		}
	}
	o.bw = bufio.NewWriterSize(&o.sink, 64<<10)
	return o
}

func (o *out) Write(b []byte) (int, error) {
	n, err := o.bw.Write(b)
	o.n += int64(n)
	return n, err
}

// zeros emits n zero bytes: a hole when possible.
func (o *out) zeros(n uint64, buf []byte) error {
	if o.sink.f != nil {
		if err := o.bw.Flush(); err != nil {
			return err
		}
		o.sink.hole += int64(n)
		o.n += int64(n)
		return nil
	}
	clear(buf)
	for n > 0 {
		k := min(n, uint64(len(buf)))
		if _, err := o.Write(buf[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// data emits b, its zero pages as holes when the destination allows.
func (o *out) data(b []byte, pageSize int) error {
	if o.sink.f == nil {
		_, err := o.Write(b)
		return err
	}
	for len(b) > 0 {
		// a run of non-zero pages, then a run of zero pages
		i := 0
		for i < len(b) && !allZero(b[i:min(i+pageSize, len(b))]) {
			i += pageSize
		}
		i = min(i, len(b))
		if _, err := o.Write(b[:i]); err != nil {
			return err
		}
		b = b[i:]
		j := 0
		for j < len(b) && allZero(b[j:min(j+pageSize, len(b))]) {
			j += pageSize
		}
		j = min(j, len(b))
		if j > 0 {
			if err := o.zeros(uint64(j), nil); err != nil {
				return err
			}
		}
		b = b[j:]
	}
	return nil
}

// finish flushes the buffer and gives a trailing hole its size.
func (o *out) finish() error {
	if err := o.bw.Flush(); err != nil {
		return err
	}
	if o.sink.hole > 0 {
		o.sink.hole--
		if _, err := o.sink.Write([]byte{0}); err != nil {
			return err
		}
	}
	return nil
}

var zeroPage = make([]byte, 64<<10)

func allZero(b []byte) bool {
	for len(b) > 0 {
		k := min(len(b), len(zeroPage))
		if !bytes.Equal(b[:k], zeroPage[:k]) {
			return false
		}
		b = b[k:]
	}
	return true
}

// emit writes the planned core: ELF header, program headers, the
// extended-numbering section header when there are too many segments,
// the notes, padding to a page, then the segments' contents.
func emit(w *out, mem io.ReaderAt, notes []byte, segs []segment, phnum int, headers uint64, st *Stats) error {
	var eh [ehdrSize]byte
	copy(eh[:], "\x7fELF")
	eh[4], eh[5], eh[6] = elfClass, 1, 1 // 64-bit, little-endian, version 1
	le.PutUint16(eh[16:], etCore)
	le.PutUint16(eh[18:], emX86_64)
	le.PutUint32(eh[20:], 1)
	le.PutUint64(eh[32:], ehdrSize) // e_phoff
	le.PutUint16(eh[52:], ehdrSize)
	le.PutUint16(eh[54:], phdrSize)
	shoff := uint64(ehdrSize + phdrSize*phnum)
	if phnum >= pnXNum {
		le.PutUint16(eh[56:], pnXNum)
		le.PutUint64(eh[40:], shoff)
		le.PutUint16(eh[58:], shdrSize)
		le.PutUint16(eh[60:], 1)
	} else {
		le.PutUint16(eh[56:], uint16(phnum))
	}
	if _, err := w.Write(eh[:]); err != nil {
		return err
	}
	var ph [phdrSize]byte
	le.PutUint32(ph[0:], ptNote)
	le.PutUint64(ph[8:], headers)
	le.PutUint64(ph[32:], uint64(len(notes)))
	le.PutUint64(ph[48:], 4)
	if _, err := w.Write(ph[:]); err != nil {
		return err
	}
	for _, s := range segs {
		ph = [phdrSize]byte{}
		var flags uint32
		if s.m.readable() {
			flags |= pfR
		}
		if s.m.writable() {
			flags |= pfW
		}
		if s.m.exec() {
			flags |= pfX
		}
		le.PutUint32(ph[0:], ptLoad)
		le.PutUint32(ph[4:], flags)
		le.PutUint64(ph[8:], s.offset)
		le.PutUint64(ph[16:], s.m.start)
		le.PutUint64(ph[32:], s.filesz)
		le.PutUint64(ph[40:], s.m.end-s.m.start)
		le.PutUint64(ph[48:], uint64(os.Getpagesize()))
		if _, err := w.Write(ph[:]); err != nil {
			return err
		}
	}
	if phnum >= pnXNum {
		var sh [shdrSize]byte
		le.PutUint32(sh[44:], uint32(phnum)) // sh_info holds the real e_phnum
		if _, err := w.Write(sh[:]); err != nil {
			return err
		}
	}
	if _, err := w.Write(notes); err != nil {
		return err
	}
	pos := headers + uint64(len(notes))
	buf := make([]byte, chunkSize)
	if len(segs) > 0 {
		if err := w.zeros(segs[0].offset-pos, buf); err != nil {
			return err
		}
	}
	for _, s := range segs {
		if err := copySegment(w, mem, s, buf, st); err != nil {
			return err
		}
	}
	return nil
}

// copySegment copies a segment's bytes from mem in chunks. When a chunk
// read stops short, the rest of the chunk is read again a page at a time;
// pages that still fail are written as zeros and reported. A short read
// without an error (end of file) means the process's memory is gone.
func copySegment(w *out, mem io.ReaderAt, s segment, buf []byte, st *Stats) error {
	pageSize := uint64(os.Getpagesize())
	for done := uint64(0); done < s.filesz; {
		addr := s.m.start + done
		n := min(uint64(len(buf)), s.filesz-done)
		got, err := mem.ReadAt(buf[:n], int64(addr))
		if uint64(got) < n {
			if gone(err) {
				return fmt.Errorf("reading %#x: %w", addr+uint64(got), ErrGone)
			}
			for p := addr + uint64(got); p < addr+n; {
				end := min(alignUp(p+1, pageSize), addr+n)
				page := buf[p-addr : end-addr]
				k, perr := mem.ReadAt(page, int64(p))
				if k < len(page) {
					if gone(perr) {
						return fmt.Errorf("reading %#x: %w", p+uint64(k), ErrGone)
					}
					clear(page[k:])
					zeroFilled(st, s.m, p+uint64(k), end, perr)
				}
				p = end
			}
		}
		if err := w.data(buf[:n], int(pageSize)); err != nil {
			return err
		}
		done += n
	}
	return nil
}

// gone tells a read that stopped short because the process's memory is
// gone (no error, or end of file: what /proc/PID/mem gives once the
// process has exited) from one that hit an unreadable page.
func gone(err error) bool { return err == nil || errors.Is(err, io.EOF) }

// zeroFilled records [from, end) of m as written with zeros, merged with
// the range before it when they touch.
func zeroFilled(st *Stats, m *mapping, from, end uint64, err error) {
	if k := len(st.ZeroFilled) - 1; k >= 0 && st.ZeroFilled[k].End == from && st.ZeroFilled[k].Start >= m.start {
		st.ZeroFilled[k].End = end
		return
	}
	st.ZeroFilled = append(st.ZeroFilled, Region{from, end, m.perms, m.path, "unreadable: " + errText(err)})
}

// WriteFile writes the core to a temporary file in dir, then gives it
// name (a file name, not a path) in dir: the file appears whole or not at
// all, with mode 0600. A failed dump leaves no file behind. Nothing that
// stands at the name is replaced or followed (a file, a link planted in a
// shared folder, a FIFO): the dump fails instead (internal/outfile's
// CreateNew).
func WriteFile(dir, name string, p *Process, opts Options) (path string, st Stats, err error) {
	if name == "" || name != filepath.Base(name) || name == "." || name == ".." {
		return "", st, fmt.Errorf("coredump: %q is not a file name", name)
	}
	path = filepath.Join(dir, name)
	f, err := outfile.CreateNew(path, 0o600)
	if err != nil {
		return "", st, fmt.Errorf("coredump: %w", err)
	}
	if st, err = Write(f.OS(), p, opts); err != nil {
		f.Abort()
		return "", st, err
	}
	if err = f.Commit(); err != nil {
		return "", st, fmt.Errorf("coredump: %w", err)
	}
	return path, st, nil
}
