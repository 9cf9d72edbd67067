package daemon

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/syslog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/gprobes/gprobes/engine"
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
	Address   string    `json:"address"`
	Pid       int       `json:"pid"`
	Tid       int       `json:"tid"`
	CPU       int       `json:"cpu"`
	Exit      uint8     `json:"exit"`
	Data      string    `json:"data"` // hex
	Truncated bool      `json:"truncated"`
	Exception string    `json:"exception,omitempty"`
	PC        uint32    `json:"pc,omitempty"`
	Line      string    `json:"line,omitempty"`
	Dump      string    `json:"dump,omitempty"`
	Debugger  string    `json:"debugger,omitempty"`
}

// FromRecord converts an engine record.
func FromRecord(target string, r *engine.Record) LogLine {
	return LogLine{Time: r.Time, Kind: r.Kind, Target: target, Module: r.Module, Major: r.Major, Minor: r.Minor,
		Location: r.Location, Address: fmt.Sprintf("%#x", r.Address), Pid: r.Pid, Tid: r.Tid, CPU: r.CPU,
		Exit: r.Exit, Data: hex.EncodeToString(r.Data), Truncated: r.Truncated, Exception: r.Exception,
		PC: r.PC, Line: r.Line, Dump: r.Dump, Debugger: r.Debugger}
}

// Text formats a record for a person: one line.
func (l *LogLine) Text() string {
	s := fmt.Sprintf("%s %s %s(%d,%d) %s %s pid %d tid %d", l.Time.Format("15:04:05.000000"), l.Kind, l.Module, l.Major, l.Minor,
		l.Location, l.Address, l.Pid, l.Tid)
	switch {
	case l.Exception != "":
		s += fmt.Sprintf(" exception %s at pc %#x", l.Exception, l.PC)
		if l.Line != "" {
			s += " (" + l.Line + ")"
		}
	default:
		s += fmt.Sprintf(" exit %d", l.Exit)
		if l.Data != "" {
			s += " data " + l.Data
			if b, err := hex.DecodeString(l.Data); err == nil {
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
	return s
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

// LogWriter appends records to the log file and to syslog, and wakes the
// readers that follow it.
//
// Durability: each record is written to the file with one write(2) before
// the probed thread resumes, so it survives a crash of gprobes once the
// thread has gone on; the file is fsync'ed every second, after which it
// also survives a crash of the machine.
type LogWriter struct {
	mu     sync.Mutex
	f      *os.File
	path   string
	sys    *syslog.Writer
	notify chan struct{} // closed and replaced at every write
	dirty  bool
	stop   chan struct{}
}

// OpenLog opens (creating) the log file in dir.
func OpenLog(dir string) (*LogWriter, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "log.jsonl")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the log: %w", err)
	}
	w := &LogWriter{f: f, path: path, notify: make(chan struct{}), stop: make(chan struct{})}
	if s, err := syslog.New(syslog.LOG_INFO|syslog.LOG_DAEMON, "gprobes"); err == nil {
		w.sys = s
	}
	go w.syncer()
	return w, nil
}

// Path is the log file.
func (w *LogWriter) Path() string { return w.path }

func (w *LogWriter) syncer() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			w.mu.Lock()
			if w.dirty {
				w.f.Sync()
				w.dirty = false
			}
			w.mu.Unlock()
		case <-w.stop:
			return
		}
	}
}

// Write appends one record.
func (w *LogWriter) Write(l *LogLine) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	w.mu.Lock()
	_, err = w.f.Write(b)
	w.dirty = true
	close(w.notify)
	w.notify = make(chan struct{})
	w.mu.Unlock()
	if w.sys != nil {
		w.sys.Info(l.Text())
	}
	return err
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
	w.mu.Lock()
	defer w.mu.Unlock()
	w.f.Sync()
	if w.sys != nil {
		w.sys.Close()
	}
	return w.f.Close()
}

// Follow copies the log to out from the start, then, if follow is set,
// every record written later, until ctx ends.
func (w *LogWriter) Follow(ctx context.Context, out io.Writer, follow bool, flush func()) error {
	f, err := os.Open(w.path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	var partial []byte
	for {
		ch := w.changed()
		for {
			line, err := r.ReadBytes('\n')
			if len(line) > 0 && line[len(line)-1] == '\n' {
				if _, werr := out.Write(append(partial, line...)); werr != nil {
					return werr
				}
				partial = partial[:0]
				continue
			}
			partial = append(partial, line...)
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
		}
		if flush != nil {
			flush()
		}
		if !follow {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil
		}
	}
}
