package daemon

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/syslog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
)

// LogLine is one committed record as the log file stores it: one JSON
// object per line.
type LogLine struct {
	Time      time.Time `json:"time"`
	Kind      string    `json:"kind"`
	Target    string    `json:"target"`
	Module    string    `json:"module"`
	Major     uint16    `json:"major"`
	Minor     uint16    `json:"minor"`
	Location  string    `json:"location"`
	Probe     string    `json:"probe,omitempty"` // the probe's kind, when not an offset probe: "retprobe", "watch"
	Address   string    `json:"address"`
	Pid       int       `json:"pid"`
	Tid       int       `json:"tid"`
	Comm      string    `json:"comm,omitempty"` // the process's command name (kernel and host targets)
	CPU       int       `json:"cpu"`
	Exit      uint8     `json:"exit"`
	Data      string    `json:"data"` // hex
	Truncated bool      `json:"truncated"`
	Exception string    `json:"exception,omitempty"`
	PC        uint32    `json:"pc,omitempty"`
	Line      string    `json:"line,omitempty"`
	Dump      string    `json:"dump,omitempty"`
	Debugger  string    `json:"debugger,omitempty"`
	// Stacks: the frames of the stacks the program logged (log ustack,
	// log kstack), named
	Stacks []probe.Stack `json:"stacks,omitempty"`
}

// FromRecord converts an engine record.
func FromRecord(target string, r *probe.Record) LogLine {
	return LogLine{Time: r.Time, Kind: string(r.Kind), Target: target, Module: r.Module, Major: r.Major, Minor: r.Minor,
		Location: r.Location, Probe: r.Probe, Address: "0x" + strconv.FormatUint(r.Address, 16), Pid: r.Pid, Tid: r.Tid, Comm: r.Comm, CPU: r.CPU,
		Exit: r.Exit, Data: hex.EncodeToString(r.Data), Truncated: r.Truncated, Exception: r.Exception,
		PC: r.PC, Line: r.Line, Dump: r.Dump, Debugger: r.Debugger, Stacks: r.Stacks}
}

// Text formats a record for a person: one line.
func (l *LogLine) Text() string { return l.TextWith(nil, "") }

// TextWith is Text with the probe's log layouts (rpn.LogLayouts): the
// data shown as the program logged it, words as numbers and strings as
// strings ("data 6 \"hello\""), where the data fits one of them; as
// hex (and as text when it is mostly text) where it does not.
//
// With the probe's format (format = "..."), the values are shown through
// it after a colon: "exit 1: wrote 6 bytes: hello".
//
// The frames of the stacks the program logged (log ustack, log kstack)
// follow, one per line, indented: "    fact+0x1c (/tmp/fact)". They are
// the record's Stacks (named when it was committed), or, for a record
// without them, the addresses its layout finds in the data.
func (l *LogLine) TextWith(layouts []rpn.Layout, format string) string {
	loc := l.Location
	if l.Probe != "" {
		loc = l.Probe + " " + loc // retprobe write
	}
	s := fmt.Sprintf("%s %s %s(%d,%d) %s %s pid %d tid %d", l.Time.Format("15:04:05.000000"), l.Kind, l.Module, l.Major, l.Minor,
		loc, l.Address, l.Pid, l.Tid)
	switch {
	case l.Exception != "":
		s += fmt.Sprintf(" exception %s at pc %#x", l.Exception, l.PC)
		if l.Line != "" {
			s += " (" + l.Line + ")"
		}
	default:
		s += fmt.Sprintf(" exit %d", l.Exit)
		b, err := hex.DecodeString(l.Data)
		vals, ok := rpn.Split(layouts, b)
		if ok && err == nil && format != "" && !l.Truncated {
			s += ": " + oneLine(rpn.FormatValues(format, vals))
		} else if ok && err == nil && len(vals) > 0 && !l.Truncated {
			s += " data"
			for _, v := range vals {
				if v.Item.Stack() {
					s += " " + stackKind(v.Item.Kind)
					continue
				}
				s += " " + v.String()
			}
		} else if l.Data != "" && len(l.Stacks) > 0 && !ok {
			s += " data " + l.Data
		} else if l.Data != "" {
			s += " data " + l.Data
			if err == nil {
				if p := printable(b); p != "" {
					s += fmt.Sprintf(" %q", p)
				}
			}
		}
		if l.Truncated {
			s += " (truncated)"
		}
	}
	if l.Dump != "" {
		s += " dump " + l.Dump
	}
	if l.Debugger != "" {
		s += " stopped for a debugger: " + l.Debugger
	}
	if l.Exception == "" {
		s += framesText(l.Stacks, layouts, l)
	}
	return s
}

// framesText is the lines of a record's stacks: each frame on its own
// line after a newline, indented by 4; a stack with no frame says so.
func framesText(named []probe.Stack, layouts []rpn.Layout, l *LogLine) string {
	stacks := named
	if len(stacks) == 0 && !l.Truncated {
		if b, err := hex.DecodeString(l.Data); err == nil {
			if vals, ok := rpn.Split(layouts, b); ok {
				for _, v := range vals {
					if v.Item.Stack() {
						stacks = append(stacks, stackOf(v))
					}
				}
			}
		}
	}
	var sb strings.Builder
	for _, st := range stacks {
		if len(st.Frames) == 0 {
			sb.WriteString("\n    (" + st.Kind + " stack: no frames)")
		}
		for _, f := range st.Frames {
			sb.WriteString("\n    " + oneLine(f.String()))
		}
	}
	return sb.String()
}

// stackOf is a logged stack without names: its addresses.
func stackOf(v rpn.Value) probe.Stack {
	st := probe.Stack{Kind: "user"}
	if v.Item.Kind == 'k' {
		st.Kind = "kernel"
	}
	for _, a := range v.Frames() {
		st.Frames = append(st.Frames, probe.Frame{Address: probe.Hex(a)})
	}
	return st
}

func stackKind(k byte) string {
	if k == 'k' {
		return "kstack"
	}
	return "ustack"
}

// printable returns b as text when it is mostly a string.
func printable(b []byte) string {
	n := 0
	for _, c := range b {
		if c >= 0x20 && c < 0x7f {
			n++
		}
	}
	if len(b) == 0 || n*4 < len(b)*3 {
		return ""
	}
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c >= 0x20 && c < 0x7f {
			out = append(out, c)
		} else {
			out = append(out, '.')
		}
	}
	return string(out)
}

// LogOptions configure the log file.
type LogOptions struct {
	// MaxSize rotates the file when a record would take it past this many
	// bytes: log.bin becomes log.bin.1, .1 becomes .2, and so on. Zero
	// never rotates.
	MaxSize int64
	// Keep is how many rotated files are kept (log.bin.1 ... .Keep); the
	// oldest goes.
	Keep int
	// Warn, if set, is told when records start being lost and when
	// writing resumes (the daemon prints it on its standard error).
	Warn func(string)
}

// The defaults of gprobes daemon --log-max-size and --log-keep.
const (
	DefaultLogMaxSize = 64 << 20
	DefaultLogKeep    = 4
)

// logFile is what LogWriter needs of the open log (an *os.File; tests
// put one that fails in its place).
type logFile interface {
	io.Writer
	io.ReaderAt
	Stat() (os.FileInfo, error)
	Truncate(size int64) error
	Sync() error
	Close() error
}

// LogWriter appends records to the log file and to syslog, and wakes the
// readers that follow it.
//
// Durability: each record is written to the file with one write(2) before
// the probed thread resumes, so it survives a crash of gprobes once the
// thread has gone on; the file is fsync'ed every second, after which it
// also survives a crash of the machine.
//
// Losses: a record the file does not take (ENOSPC, EIO, a short write) is
// counted, per probe, with the error; the bytes of it that did go in are
// cut off again (ftruncate back to the end of the last whole record), so
// the file only ever holds whole lines and the next record that can be
// written starts on a line of its own. Readers never read past that end.
// Records syslog misses are counted the same way.
type LogWriter struct {
	mu   sync.Mutex
	f    logFile // nil after a rotation that could not open a new file
	path string
	opts LogOptions
	size int64        // end of the last whole record in f
	torn bool         // f holds bytes past size that could not be cut off yet
	gen  uint64       // generations so far: rotations, and files renamed, removed or cut under the daemon
	id   fileID       // f's identity
	gens []generation // the generations remembered, the current one (w.gen) last (logfile.go)
	// dropped: records of generations moved away under the daemon and
	// since forgotten, by awayKind
	dropped  awayCounts
	replaced uint64      // files renamed, removed or cut under the daemon
	checked  time.Time   // when checkFile last ran
	moved    atomic.Bool // the directory entry may have changed (watchName): check at the next write
	unwatch  func()
	checkErr string        // what checkFile said last when it could not open a new file
	notify   chan struct{} // closed and replaced at every write
	dirty    bool
	stop     chan struct{}
	buf      []byte
	jbuf     []byte // the JSON line for Tee
	enc      frameEncoder
	// failing is set while records are being lost, lostAt the count when
	// it began (for the Warn messages)
	failing   bool
	lostAt    uint64
	rotateErr string
	rotateTry time.Time
	lost      Losses // records not in the file
	// TargetLost, when set, counts the records the targets dropped
	// (jump pads' full rings): log's lost line reports it
	TargetLost func() uint64
	sys        *syslog.Writer
	sysq       chan LogLine
	sysLost    Losses // records syslog missed
	// written and sysWritten count the records the file and syslog took
	written, sysWritten atomic.Uint64
	// Tee, when set (before the first Write), gets every record with its
	// line as the file has it (without the newline), whether the file took
	// it or not, under the writer's lock: the exporters' (export.go)
	Tee func(l *LogLine, line []byte)
}

// OpenLog opens (creating) the log file in dir. A torn frame at its end,
// left by a gprobes or a machine that died in the middle of a write, is
// cut off, and Warn told how many bytes were.
func OpenLog(dir string, opts ...LogOptions) (*LogWriter, error) {
	o := LogOptions{MaxSize: DefaultLogMaxSize, Keep: DefaultLogKeep}
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.MaxSize < 0 || o.Keep < 0 {
		return nil, fmt.Errorf("log: a negative size or count (max size %d, keep %d)", o.MaxSize, o.Keep)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, LogFileName)
	f, size, records, torn, err := openLogFile(path)
	if err != nil {
		return nil, fmt.Errorf("open the log: %w", err)
	}
	w := &LogWriter{f: f, path: path, opts: o, size: size, notify: make(chan struct{}), stop: make(chan struct{}), checked: time.Now()}
	w.id = fileIDOf(mustStat(f))
	w.newGeneration(records)
	w.warn(torn)
	if _, err := os.Stat(filepath.Join(dir, OldLogFileName)); err == nil {
		w.warn(fmt.Sprintf("%s is the JSON-lines log of an earlier gprobes: this daemon writes %s and does not serve the older file; read it with gprobes log --file %s",
			filepath.Join(dir, OldLogFileName), LogFileName, filepath.Join(dir, OldLogFileName)))
	}
	if stop, err := watchName(path, &w.moved); err == nil {
		w.unwatch = stop
	}
	if s, err := syslog.New(syslog.LOG_INFO|syslog.LOG_DAEMON, "gprobes"); err == nil {
		w.sys = s
		w.sysq = make(chan LogLine, 4096)
		go w.syslogger()
	}
	go w.syncer()
	return w, nil
}

// wholeFrames cuts off a torn frame at the end of f (one not whole, or
// whose CRC does not match) and returns the size left, the records in it,
// and, when it cut, a sentence saying what. A file without a header (new,
// or emptied under the daemon) gets one.
func wholeFrames(f logFile) (size int64, records uint64, torn string, err error) {
	st, err := f.Stat()
	if err != nil {
		return 0, 0, "", err
	}
	end := st.Size()
	whole, records, why, err := scanFrames(f, end)
	if err != nil {
		return 0, 0, "", err
	}
	if whole < fileHeaderSize {
		// empty, or a header cut short
		if err := f.Truncate(0); err != nil {
			return 0, 0, "", err
		}
		if _, err := f.Write(fileHeader()); err != nil {
			f.Truncate(0)
			return 0, 0, "", fmt.Errorf("write the log's header: %w", err)
		}
		if end > 0 {
			torn = fmt.Sprintf("the log file ended in a torn header (%d bytes, a daemon that died writing it): started again", end)
		}
		return fileHeaderSize, 0, torn, nil
	}
	if whole != end {
		if err := f.Truncate(whole); err != nil {
			return 0, 0, "", err
		}
		torn = fmt.Sprintf("the log file had a torn tail (%s; a daemon or a machine that died in the middle of a write): cut off %d bytes after its last whole record at offset %d; its %s are kept",
			why, end-whole, whole, plural(records, "record"))
	}
	return whole, records, torn, nil
}

// Path is the log file.
func (w *LogWriter) Path() string { return w.path }

// rotated is the name of the n-th rotated file (0: the current one).
func (w *LogWriter) rotated(n int) string {
	if n == 0 {
		return w.path
	}
	return w.path + "." + strconv.Itoa(n)
}

func (w *LogWriter) syncer() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			w.mu.Lock()
			if w.dirty && w.f != nil {
				w.f.Sync()
				w.dirty = false
			}
			msg := w.checkFile()
			w.mu.Unlock()
			w.warn(msg)
		case <-w.stop:
			return
		}
	}
}

// Write appends one record. A record that cannot be written is counted as
// lost (Status, Lost) and the error returned.
func (w *LogWriter) Write(l *LogLine) error {
	w.mu.Lock()
	var checked string
	if w.moved.Swap(false) || time.Since(w.checked) >= checkInterval {
		checked = w.checkFile()
	}
	w.enc.reset()
	w.enc.add(l)
	w.buf = w.enc.appendFrame(w.buf[:0])
	err := w.append(w.buf)
	if w.Tee != nil {
		w.jbuf = l.AppendJSON(w.jbuf[:0])
		w.Tee(l, w.jbuf)
	}
	var warn string
	if err != nil {
		w.lost.Add(l.Target, l.Module, l.Minor, err)
		if !w.failing {
			w.failing, w.lostAt = true, w.lost.Total()-1
			warn = fmt.Sprintf("records are being lost: %v", err)
		}
	} else {
		w.written.Add(1)
		if w.failing {
			w.failing = false
			warn = fmt.Sprintf("writing the log again, %s lost since the last error began", plural(w.lost.Total()-w.lostAt, "record"))
		}
	}
	close(w.notify)
	w.notify = make(chan struct{})
	w.mu.Unlock()
	w.warn(checked)
	w.warn(warn)
	if w.sys != nil {
		// syslog is a copy for the system's log: sent by its own goroutine,
		// off the path of the probed thread; dropped (and counted) if that
		// falls behind
		select {
		case w.sysq <- *l:
		default:
			w.sysLost.Add(l.Target, l.Module, l.Minor, errSyslogBehind)
		}
	}
	return err
}

// WriteBatch appends records that were committed in the target already
// (a drain of a jump pad's ring): their lines go to the file in writes of
// up to batchBytes (one write(2) for many records, where Write makes one
// a record), each piece whole or, with the error, counted lost record by
// record, as Write does. The readers are woken once.
func (w *LogWriter) WriteBatch(ls []LogLine) {
	if len(ls) == 0 {
		return
	}
	w.mu.Lock()
	var checked string
	if w.moved.Swap(false) || time.Since(w.checked) >= checkInterval {
		checked = w.checkFile()
	}
	var warns []string
	buf := w.buf[:0]
	w.enc.reset()
	// flush writes the frame of ls[from:to] (one write(2))
	flush := func(from, to int) {
		if to == from {
			return
		}
		buf = w.enc.appendFrame(buf[:0])
		err := w.appendN(buf, to-from)
		w.enc.reset()
		if w.Tee != nil {
			for i := from; i < to; i++ {
				w.jbuf = ls[i].AppendJSON(w.jbuf[:0])
				w.Tee(&ls[i], w.jbuf)
			}
		}
		if err != nil {
			for i := from; i < to; i++ {
				w.lost.Add(ls[i].Target, ls[i].Module, ls[i].Minor, err)
			}
			if !w.failing {
				w.failing, w.lostAt = true, w.lost.Total()-uint64(to-from)
				warns = append(warns, fmt.Sprintf("records are being lost: %v", err))
			}
		} else {
			w.written.Add(uint64(to - from))
			if w.failing {
				w.failing = false
				warns = append(warns, fmt.Sprintf("writing the log again, %s lost since the last error began", plural(w.lost.Total()-w.lostAt, "record")))
			}
		}
	}
	from := 0
	for i := range ls {
		// a frame never passes the file's rotation size by more than a
		// record, as one record a write would not
		next := w.enc.size() + recordBound(&ls[i])
		if w.enc.count > 0 && (next > batchBytes || w.opts.MaxSize > 0 && w.size+int64(next) > w.opts.MaxSize) {
			flush(from, i)
			from = i
		}
		w.enc.add(&ls[i])
	}
	flush(from, len(ls))
	w.buf = buf[:0]
	close(w.notify)
	w.notify = make(chan struct{})
	w.mu.Unlock()
	w.warn(checked)
	for _, m := range warns {
		w.warn(m)
	}
	if w.sys != nil {
		for i := range ls {
			select {
			case w.sysq <- ls[i]:
			default:
				w.sysLost.Add(ls[i].Target, ls[i].Module, ls[i].Minor, errSyslogBehind)
			}
		}
	}
}

// batchBytes is the most bytes WriteBatch writes at once.
const batchBytes = 1 << 20

var errSyslogBehind = errors.New("syslog fell behind (4096 records queued)")

// warn tells the user msg, if there is one (LogOptions.Warn).
func (w *LogWriter) warn(msg string) {
	if msg != "" && w.opts.Warn != nil {
		w.opts.Warn(msg)
	}
}

// append writes b, a whole record, at the end of the file, or nothing.
// Called with w.mu held.
func (w *LogWriter) append(b []byte) error { return w.appendN(b, 1) }

// appendN writes b, n whole records, at the end of the file, or nothing.
// Called with w.mu held.
func (w *LogWriter) appendN(b []byte, records int) error {
	if w.f == nil {
		f, size, records, torn, err := openLogFile(w.path)
		if err != nil {
			return fmt.Errorf("open the log: %w", err)
		}
		w.warn(torn)
		w.f, w.size, w.torn = f, size, false
		w.id = fileIDOf(mustStat(f))
		w.gens[len(w.gens)-1] = generation{n: w.gen, id: w.id, records: records}
	}
	if w.torn {
		if err := w.f.Truncate(w.size); err != nil {
			return fmt.Errorf("cut off a partial record: %w", err)
		}
		w.torn = false
	}
	if w.opts.MaxSize > 0 && w.size > fileHeaderSize && w.size+int64(len(b)) > w.opts.MaxSize {
		w.warn(w.checkFile()) // rotate the daemon's own file, not one put at its path
		w.rotate()
		if w.f == nil {
			return errors.New("log rotation: " + w.rotateErr)
		}
	}
	n, err := w.f.Write(b)
	if err == nil && n != len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		// whatever part of the record went in is cut off again
		if terr := w.f.Truncate(w.size); terr != nil {
			w.torn = true
		}
		return err
	}
	w.size += int64(n)
	w.dirty = true
	w.current().records += uint64(records)
	return nil
}

// rotate renames log.bin to log.bin.1 (and .1 to .2 ...) and starts a
// new file. The new file is created first: if it cannot be, the current
// file stays in use (past its size) and rotation is tried again a second
// later. Called with w.mu held, so readers see the renames at once.
func (w *LogWriter) rotate() {
	if time.Since(w.rotateTry) < time.Second && w.rotateErr != "" {
		return
	}
	w.rotateTry = time.Now()
	tmp := w.path + ".new"
	os.Remove(tmp) // a leftover of a daemon that died rotating; never followed if a link
	nf, err := os.OpenFile(tmp, os.O_RDWR|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		w.rotateErr = err.Error()
		return
	}
	if _, err := nf.Write(fileHeader()); err != nil {
		nf.Close()
		os.Remove(tmp)
		w.rotateErr = err.Error()
		return
	}
	if w.opts.Keep > 0 {
		os.Remove(w.rotated(w.opts.Keep))
		for k := w.opts.Keep - 1; k >= 1; k-- {
			if err := os.Rename(w.rotated(k), w.rotated(k+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
				w.rotateErr = err.Error()
			}
		}
		if err := os.Rename(w.path, w.rotated(1)); err != nil {
			nf.Close()
			os.Remove(tmp)
			w.rotateErr = err.Error()
			return
		}
	}
	if err := os.Rename(tmp, w.path); err != nil {
		// the current file may have gone to .1: the next write opens a
		// new log.bin
		nf.Close()
		os.Remove(tmp)
		w.rotateErr = err.Error()
		old := w.f
		w.f, w.size = nil, 0
		w.gen++
		w.id = fileID{}
		w.newGeneration(0) // its file is opened by the next write
		go func() { old.Sync(); old.Close() }()
		return
	}
	old := w.f
	w.f, w.size, w.dirty = nf, fileHeaderSize, false
	w.gen++
	w.id = fileIDOf(mustStat(nf))
	w.newGeneration(0)
	w.rotateErr = ""
	go func() { old.Sync(); old.Close() }()
}

func (w *LogWriter) syslogger() {
	for {
		select {
		case l := <-w.sysq:
			if err := w.sys.Info(l.Text()); err != nil {
				w.sysLost.Add(l.Target, l.Module, l.Minor, fmt.Errorf("syslog: %w", err))
			} else {
				w.sysWritten.Add(1)
			}
		case <-w.stop:
			return
		}
	}
}

// Lost is how many records of one probe are not in the log file, and how
// many syslog missed.
func (w *LogWriter) Lost(target, module string, minor uint16) (file, syslog uint64) {
	return w.lost.Of(target, module, minor), w.sysLost.Of(target, module, minor)
}

// Status says what was lost and how the log rotates.
func (w *LogWriter) Status() LogStatus {
	w.mu.Lock()
	msg := w.checkFile()
	st := LogStatus{LogSize: w.size, LogMaxSize: w.opts.MaxSize, LogKeep: w.opts.Keep, RotateError: w.rotateErr, Rotations: w.gen - w.replaced, Replaced: w.replaced}
	w.mu.Unlock()
	w.warn(msg)
	st.Lost = w.lost.Summary()
	st.SyslogLost = w.sysLost.Summary()
	st.Written, st.SyslogWritten = w.written.Load(), w.sysWritten.Load()
	return st
}

// changed returns a channel closed at the next write.
func (w *LogWriter) changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.notify
}

// Close syncs and closes the log.
func (w *LogWriter) Close() error {
	close(w.stop)
	if w.unwatch != nil {
		w.unwatch()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sys != nil {
		w.sys.Close()
	}
	if w.f == nil {
		return nil
	}
	w.f.Sync()
	return w.f.Close()
}

// Follow copies the log to out from the start (the rotated files still
// kept, oldest first, then the current one), then, if follow is set, every
// record written later, across rotations, until ctx ends. Only whole lines
// are copied. When records were lost, a LostLine (kind "lost") with the
// daemon-wide counts follows the records read: at the end without follow;
// with follow, whenever the counts change, at most once a second. The
// LostLine also says how many records this reader could not read because
// their file was renamed, removed or cut under the daemon (logfile.go).
//
// Each generation of the log is found by the identity of its file, not by
// its name: a file logrotate put at a name the daemon uses is not read as
// the daemon's.
func (w *LogWriter) Follow(ctx context.Context, out io.Writer, follow bool, flush func()) error {
	type opened struct {
		f *os.File
		n uint64
	}
	var queue []opened // the generations kept when the reader started, opened at once so none goes away
	var away awayCounts
	w.mu.Lock()
	msg := w.checkFile()
	// each name opened once (the writer waits meanwhile), then matched
	// to the generations by identity
	byID := map[fileID]*os.File{}
	for k := 0; k <= w.opts.Keep; k++ {
		f, err := os.Open(w.rotated(k))
		if err != nil {
			continue
		}
		st, err := f.Stat()
		if id := fileIDOf(st); err != nil || byID[id] != nil {
			f.Close()
			continue
		} else {
			byID[id] = f
		}
	}
	for _, g := range w.gens {
		f := byID[g.id]
		if f != nil && g.id != (fileID{}) && w.latest(g) {
			delete(byID, g.id)
		} else if f = nil; g.n == w.gen {
			// the file being written is at no name the daemon reads (moved
			// away, and no new one could be opened): read it through the
			// writer's own descriptor
			f = w.openGeneration(g)
		}
		if f != nil {
			queue = append(queue, opened{f, g.n})
		} else if g.away != inChain {
			away[g.away] += g.records
		}
	}
	for _, f := range byID {
		f.Close() // not the daemon's (a copy logrotate made), or a generation forgotten
	}
	for k, n := range w.dropped {
		away[k] += n
	}
	next := w.gen + 1 // the first generation not in the queue
	w.mu.Unlock()
	w.warn(msg)
	var cur *os.File
	var curN uint64
	var pos int64
	var lines uint64 // lines read of the current generation
	defer func() {
		if cur != nil {
			cur.Close()
		}
		for _, o := range queue {
			o.f.Close()
		}
	}()
	var reported [7]uint64
	var reportedAt time.Time
	var skipped uint64 // rotated files deleted before this reader got to them
	for {
		w.mu.Lock()
		msg := w.checkFile()
		ch := w.notify
		if cur == nil && len(queue) > 0 {
			cur, curN, pos, lines = queue[0].f, queue[0].n, 0, 0
			queue = queue[1:]
		}
		for cur == nil && next <= w.gen {
			g, ok := w.generation(next)
			next++
			if !ok {
				skipped++
				continue
			}
			if f := w.openGeneration(g); f != nil {
				cur, curN, pos, lines = f, g.n, 0, 0
			} else if g.away != inChain {
				away[g.away] += g.records
			} else if g.n != w.gen {
				skipped++ // rotated away before this reader got to it
			}
		}
		limit := int64(-1) // a generation that is over is read to its end
		if cur != nil {
			if g, ok := w.generation(curN); ok {
				switch {
				case g.n == w.gen:
					limit = w.size
				case g.away == cutAway:
					// its bytes are gone: what is in the file now is the
					// next generation's
					limit = pos
					if g.records > lines {
						away[cutAway] += g.records - lines
					}
				}
			}
		}
		done := cur != nil && limit < 0 || limit == pos && cur != nil && curN != w.gen
		w.mu.Unlock()
		w.warn(msg)
		if cur != nil {
			var err error
			pos, _, err = copyRecords(out, cur, pos, limit, &lines)
			if err != nil {
				return err
			}
			if done {
				cur.Close()
				cur = nil
				continue
			}
		}
		lost, slost := w.lost.Summary(), w.sysLost.Summary()
		var inTargets uint64
		if w.TargetLost != nil {
			inTargets = w.TargetLost()
		}
		now := [7]uint64{lost.Records, slost.Records, skipped, inTargets, away[renamedAway], away[removedAway], away[cutAway]}
		pending := now != reported
		if pending && (!follow || time.Since(reportedAt) >= time.Second) {
			b, _ := json.Marshal(LostLine{Time: time.Now(), Kind: "lost", Lost: lost, SyslogLost: slost, RotatedAway: skipped, InTargets: inTargets,
				RenamedAway: away[renamedAway], RemovedAway: away[removedAway], CutAway: away[cutAway]})
			if _, err := out.Write(append(b, '\n')); err != nil {
				return err
			}
			reported = now
			reportedAt = time.Now()
			pending = false
		}
		if flush != nil {
			flush()
		}
		if !follow {
			return nil
		}
		var tick <-chan time.Time
		if pending {
			tick = time.After(time.Until(reportedAt.Add(time.Second)))
		}
		select {
		case <-ch:
		case <-tick:
		case <-ctx.Done():
			return nil
		}
	}
}

// copyLines copies the whole lines of f from pos to limit (to its end if
// limit < 0) to out, and returns where it stopped: after the last newline.
func copyLines(out io.Writer, f *os.File, pos, limit int64) (int64, error) {
	n := int64(1<<63 - 1)
	if limit >= 0 {
		if limit <= pos {
			return pos, nil
		}
		n = limit - pos
	}
	r := bufio.NewReaderSize(io.NewSectionReader(f, pos, n), 64<<10)
	for {
		line, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// a line longer than the buffer: gather it
			long := append([]byte(nil), line...)
			for err == bufio.ErrBufferFull {
				line, err = r.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if len(line) > 0 && line[len(line)-1] == '\n' {
			if _, werr := out.Write(line); werr != nil {
				return pos, werr
			}
			pos += int64(len(line))
		}
		if err == io.EOF {
			return pos, nil
		}
		if err != nil {
			return pos, err
		}
	}
}

// AppendJSON appends the record as one JSON object, as encoding/json would
// write it (same keys, same order), without reflection: it is on the path
// of every committed record, before the probed thread resumes
// (BenchmarkLogLine: 165 ns against 630 ns for json.Marshal, no allocation).
func (l *LogLine) AppendJSON(b []byte) []byte {
	b = append(b, `{"time":"`...)
	b = l.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","kind":`...)
	b = appendString(b, l.Kind)
	b = append(b, `,"target":`...)
	b = appendString(b, l.Target)
	b = append(b, `,"module":`...)
	b = appendString(b, l.Module)
	b = append(b, `,"major":`...)
	b = strconv.AppendUint(b, uint64(l.Major), 10)
	b = append(b, `,"minor":`...)
	b = strconv.AppendUint(b, uint64(l.Minor), 10)
	b = append(b, `,"location":`...)
	b = appendString(b, l.Location)
	if l.Probe != "" {
		b = append(b, `,"probe":`...)
		b = appendString(b, l.Probe)
	}
	b = append(b, `,"address":`...)
	b = appendString(b, l.Address)
	b = append(b, `,"pid":`...)
	b = strconv.AppendInt(b, int64(l.Pid), 10)
	b = append(b, `,"tid":`...)
	b = strconv.AppendInt(b, int64(l.Tid), 10)
	if l.Comm != "" {
		b = append(b, `,"comm":`...)
		b = appendString(b, l.Comm)
	}
	b = append(b, `,"cpu":`...)
	b = strconv.AppendInt(b, int64(l.CPU), 10)
	b = append(b, `,"exit":`...)
	b = strconv.AppendUint(b, uint64(l.Exit), 10)
	b = append(b, `,"data":"`...)
	b = append(b, l.Data...) // hex: nothing to escape
	b = append(b, `","truncated":`...)
	b = strconv.AppendBool(b, l.Truncated)
	if l.Exception != "" {
		b = append(b, `,"exception":`...)
		b = appendString(b, l.Exception)
	}
	if l.PC != 0 {
		b = append(b, `,"pc":`...)
		b = strconv.AppendUint(b, uint64(l.PC), 10)
	}
	if l.Line != "" {
		b = append(b, `,"line":`...)
		b = appendString(b, l.Line)
	}
	if l.Dump != "" {
		b = append(b, `,"dump":`...)
		b = appendString(b, l.Dump)
	}
	if l.Debugger != "" {
		b = append(b, `,"debugger":`...)
		b = appendString(b, l.Debugger)
	}
	if len(l.Stacks) > 0 {
		b = append(b, `,"stacks":[`...)
		for i, st := range l.Stacks {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"kind":`...)
			b = appendString(b, st.Kind)
			b = append(b, `,"frames":[`...)
			for j, f := range st.Frames {
				if j > 0 {
					b = append(b, ',')
				}
				b = append(b, `{"address":"0x`...)
				b = strconv.AppendUint(b, uint64(f.Address), 16)
				b = append(b, '"')
				if f.Function != "" {
					b = append(b, `,"function":`...)
					b = appendString(b, f.Function)
				}
				if f.Offset != 0 {
					b = append(b, `,"offset":`...)
					b = strconv.AppendUint(b, f.Offset, 10)
				}
				if f.Module != "" {
					b = append(b, `,"module":`...)
					b = appendString(b, f.Module)
				}
				b = append(b, '}')
			}
			b = append(b, "]}"...)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// appendString appends s as a JSON string, escaping what JSON requires
// and, as encoding/json does, <, > and &.
func appendString(b []byte, s string) []byte {
	const hexd = "0123456789abcdef"
	plain := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			plain = false
			break
		}
	}
	if plain {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	b = append(b, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r == '\n':
			b = append(b, '\\', 'n')
		case r == '\r':
			b = append(b, '\\', 'r')
		case r == '\t':
			b = append(b, '\\', 't')
		case r < 0x20 || r == '<' || r == '>' || r == '&' || r == 0x2028 || r == 0x2029:
			b = append(b, '\\', 'u', hexd[r>>12&0xf], hexd[r>>8&0xf], hexd[r>>4&0xf], hexd[r&0xf])
		case r == utf8.RuneError:
			b = append(b, `\ufffd`...)
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return append(b, '"')
}

// oneLine escapes what would break a record's line: control characters
// as Go's strconv.Quote spells them (\n, \x1b), backslashes as they are.
func oneLine(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r < 0x20 && r != '\t' || r == 0x7f {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
