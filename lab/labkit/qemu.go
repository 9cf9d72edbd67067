package labkit

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/gprobes/gprobes/internal/testkit"
)

// QEMU is a running qemu-system-x86_64 (QEMUConfig.Binary) whose serial
// port is its stdio ("-serial stdio"): what the guest prints is kept as
// lines, QEMU's stderr apart, and callers wait for lines.
type QEMU struct {
	cmd     *exec.Cmd
	bin     string // QEMUConfig.Binary, for messages
	stdin   io.WriteCloser
	panicRe *regexp.Regexp
	tmpDir  string
	started time.Time

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every new line or exit
	lines    []string      // complete serial lines, "\r" removed
	partial  []byte
	raw      bytes.Buffer // the serial log
	stderr   bytes.Buffer // QEMU's own messages
	exited   bool
	exitErr  error
	waitNext int // first line WaitFor has not looked at
	logFile  *os.File
	marks    []Milestone
	reached  []time.Duration // when each of marks was first seen; 0: not yet
	lastLine time.Duration   // when the last complete line came

	killOnce sync.Once
	done     chan struct{} // closed when QEMU has exited and been reaped
}

// QEMUConfig says how to run QEMU.
type QEMUConfig struct {
	// Binary is the QEMU to run, a path or a name looked up in PATH;
	// default "qemu-system-x86_64" (the system's)
	Binary string
	// Env is added to QEMU's environment (this process's), for a QEMU in a
	// private prefix (LD_LIBRARY_PATH, QEMU_MODULE_DIR)
	Env        []string
	Args       []string   // QEMU's arguments, "-serial stdio" among them
	ExtraFiles []*os.File // QEMU's fds 3, 4, ...
	LogPath    string     // a copy of the serial output, if not empty
	TmpDir     string     // the VM's temporary files: removed by Kill and Cleanup
	// a line matching Panic ends a boot wait (WaitLine with boot) at once
	Panic *regexp.Regexp
	// Milestones of the boot, in order: the first line matching each is
	// timed, and a wait that fails says which were seen when (Progress)
	Milestones []Milestone
	// NoLabLock: this is no lab (a fake guest in labkit's own tests), and
	// takes no lab lock
	NoLabLock bool
}

// Milestone is a step of a boot, recognised by the first line matching Re.
type Milestone struct {
	Name string
	Re   *regexp.Regexp
}

// StartQEMU runs cfg.Binary (qemu-system-x86_64). Cancelling ctx kills it,
// and it gets SIGKILL if this process dies first.
//
// It first takes the lab lock (testkit.LockLab: GPROBES_LAB_LOCK, default
// /tmp/lab.lock), waiting while another process's lab runs, and holds it
// until QEMU has exited: two TCG labs at once slow each other 10-30
// times. A test that boots a lab is thereby serialized with every other
// lab on the machine, whoever started it, and a guest shared by several
// tests holds the lock for as long as it runs.
func StartQEMU(ctx context.Context, cfg QEMUConfig) (q *QEMU, err error) {
	unlock := func() {}
	if !cfg.NoLabLock {
		if unlock, err = testkit.LockLab(); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				unlock()
			}
		}()
	}
	q, err = startQEMU(ctx, cfg)
	if err != nil {
		return nil, err
	}
	go func() {
		<-q.done
		unlock()
	}()
	return q, nil
}

func startQEMU(ctx context.Context, cfg QEMUConfig) (*QEMU, error) {
	q := &QEMU{panicRe: cfg.Panic, tmpDir: cfg.TmpDir, changed: make(chan struct{}), done: make(chan struct{}),
		marks: cfg.Milestones, reached: make([]time.Duration, len(cfg.Milestones))}
	bin := cfg.Binary
	if bin == "" {
		bin = "qemu-system-x86_64"
	}
	q.bin = bin
	q.cmd = exec.Command(bin, cfg.Args...)
	if len(cfg.Env) > 0 {
		q.cmd.Env = append(os.Environ(), cfg.Env...)
	}
	q.cmd.ExtraFiles = cfg.ExtraFiles
	dieWithParent(q.cmd)
	q.cmd.Stderr = stderrWriter{q}
	stdout, err := q.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if q.stdin, err = q.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if cfg.LogPath != "" {
		if q.logFile, err = os.Create(cfg.LogPath); err != nil {
			return nil, err
		}
	}
	q.started = time.Now()
	if err := q.cmd.Start(); err != nil {
		if q.logFile != nil {
			q.logFile.Close()
		}
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	readerDone := make(chan struct{})
	go q.readSerial(stdout, readerDone)
	go func() {
		<-readerDone
		err := q.cmd.Wait()
		q.mu.Lock()
		q.exited = true
		q.exitErr = err
		q.notifyLocked()
		q.mu.Unlock()
		if q.logFile != nil {
			q.logFile.Close()
		}
		close(q.done)
	}()
	go func() {
		select {
		case <-ctx.Done():
			q.Kill()
		case <-q.done:
		}
	}()
	return q, nil
}

type stderrWriter struct{ q *QEMU }

func (w stderrWriter) Write(p []byte) (int, error) {
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	w.q.stderr.Write(p)
	return len(p), nil
}

func (q *QEMU) notifyLocked() {
	close(q.changed)
	q.changed = make(chan struct{})
}

func (q *QEMU) readSerial(r io.Reader, done chan struct{}) {
	defer close(done)
	br := bufio.NewReaderSize(r, 64<<10)
	buf := make([]byte, 32<<10)
	for {
		n, err := br.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			q.mu.Lock()
			q.raw.Write(chunk)
			if q.logFile != nil {
				q.logFile.Write(chunk)
			}
			for len(chunk) > 0 {
				i := bytes.IndexByte(chunk, '\n')
				if i < 0 {
					q.partial = append(q.partial, chunk...)
					break
				}
				q.partial = append(q.partial, chunk[:i]...)
				line := strings.ReplaceAll(string(q.partial), "\r", "")
				q.lines = append(q.lines, line)
				q.lastLine = time.Since(q.started)
				for j, m := range q.marks {
					if q.reached[j] == 0 && m.Re.MatchString(line) {
						q.reached[j] = q.lastLine
					}
				}
				q.partial = q.partial[:0]
				chunk = chunk[i+1:]
			}
			q.notifyLocked()
			q.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// Started is when QEMU was started.
func (q *QEMU) Started() time.Time { return q.started }

// Stdin is the guest's serial input.
func (q *QEMU) Stdin() io.Writer { return q.stdin }

// WaitLine waits for a line at index >= from that satisfies match. With
// boot, a line matching the panic pattern fails at once.
func (q *QEMU) WaitLine(ctx context.Context, from int, timeout time.Duration, match func(string) bool, boot bool) (string, int, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		q.mu.Lock()
		for i := from; i < len(q.lines); i++ {
			l := q.lines[i]
			if match(l) {
				q.mu.Unlock()
				return l, i, nil
			}
			if boot && q.panicRe != nil && q.panicRe.MatchString(l) {
				q.mu.Unlock()
				q.panicEnd()
				return "", -1, fmt.Errorf("panic (%s)\n%s", q.Progress(), q.LogTail(60))
			}
		}
		from = len(q.lines)
		if q.exited {
			err := q.exitErr
			q.mu.Unlock()
			return "", -1, fmt.Errorf("%s exited (%v; %s)\n%s", q.bin, err, q.progressLocked(), q.LogTail(60))
		}
		ch := q.changed
		q.mu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
			return "", -1, fmt.Errorf("timeout after %v (%s)\n%s", timeout, q.Progress(), q.LogTail(60))
		case <-ctx.Done():
			return "", -1, fmt.Errorf("%w\n%s", ctx.Err(), q.LogTail(60))
		}
	}
}

// panicEnd waits for the rest of a panic's message, for the error: the
// end of Linux's ("---[ end Kernel panic"), or QEMU's exit (a panic powers
// off or reboots, which -no-reboot makes an exit), up to 30 s.
func (q *QEMU) panicEnd() {
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for from := 0; ; {
		q.mu.Lock()
		for ; from < len(q.lines); from++ {
			if strings.Contains(q.lines[from], "---[ end Kernel panic") {
				q.mu.Unlock()
				return
			}
		}
		ch, exited := q.changed, q.exited
		q.mu.Unlock()
		if exited {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			return
		}
	}
}

// Progress says how far the guest got: the milestones seen, with their
// times from QEMU's start, the first not seen, and how many lines came,
// the last when. It tells a slow boot (lines still coming) from a stuck
// one.
func (q *QEMU) Progress() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.progressLocked()
}

func (q *QEMU) progressLocked() string {
	var b strings.Builder
	for i, m := range q.marks {
		if q.reached[i] == 0 {
			fmt.Fprintf(&b, "%s not seen; ", m.Name)
			break
		}
		fmt.Fprintf(&b, "%s at %.1f s; ", m.Name, q.reached[i].Seconds())
	}
	now := time.Since(q.started)
	if len(q.lines) == 0 {
		fmt.Fprintf(&b, "no serial line in %.0f s", now.Seconds())
	} else {
		fmt.Fprintf(&b, "%d serial lines, the last at %.1f s, %.0f s ago", len(q.lines), q.lastLine.Seconds(), (now - q.lastLine).Seconds())
	}
	return b.String()
}

// WaitFor waits for a line matching re and not skipped, after the previous
// WaitFor match (or the mark set by SetWaitMark), and returns it.
func (q *QEMU) WaitFor(re *regexp.Regexp, timeout time.Duration, skip func(string) bool) (string, error) {
	q.mu.Lock()
	from := q.waitNext
	q.mu.Unlock()
	line, idx, err := q.WaitLine(context.Background(), from, timeout, func(l string) bool {
		return !skip(l) && re.MatchString(l)
	}, false)
	if err != nil {
		return "", fmt.Errorf("waiting for /%s/: %w", re, err)
	}
	q.SetWaitMark(idx + 1)
	return line, nil
}

// SetWaitMark makes WaitFor look at lines from index i on (never back).
func (q *QEMU) SetWaitMark(i int) {
	q.mu.Lock()
	if i > q.waitNext {
		q.waitNext = i
	}
	q.mu.Unlock()
}

// NumLines is the number of complete lines so far.
func (q *QEMU) NumLines() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.lines)
}

// Lines is a copy of lines [from, to) (to < 0: all so far).
func (q *QEMU) Lines(from, to int) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	if to < 0 || to > len(q.lines) {
		to = len(q.lines)
	}
	if from > to {
		return nil
	}
	return append([]string(nil), q.lines[from:to]...)
}

// LogTail is the end of the serial log and QEMU's stderr, for errors.
func (q *QEMU) LogTail(n int) string {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := "--- serial log (tail) ---\n" + Tail(q.raw.String(), n)
	if q.stderr.Len() > 0 {
		s += "\n--- qemu stderr ---\n" + Tail(q.stderr.String(), 20)
	}
	return s
}

// Log is the serial log so far ("\r" removed), followed by QEMU's stderr
// if any.
func (q *QEMU) Log() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := strings.ReplaceAll(q.raw.String(), "\r", "")
	if q.stderr.Len() > 0 {
		s += "\n--- qemu stderr ---\n" + q.stderr.String()
	}
	return s
}

// Binary is the QEMU that runs (QEMUConfig.Binary).
func (q *QEMU) Binary() string { return q.bin }

// Pid is QEMU's process id.
func (q *QEMU) Pid() int { return q.cmd.Process.Pid }

// Done is closed when QEMU has exited and been reaped.
func (q *QEMU) Done() <-chan struct{} { return q.done }

// Exited reports whether QEMU has exited.
func (q *QEMU) Exited() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.exited
}

// ExitErr is QEMU's exit status once Done is closed.
func (q *QEMU) ExitErr() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.exitErr
}

// PowerOff has the guest power the machine off (send types the command)
// and waits for QEMU to exit cleanly; on timeout it kills QEMU.
func (q *QEMU) PowerOff(send func() error, timeout time.Duration) error {
	select {
	case <-q.done:
		return fmt.Errorf("poweroff: %s already exited (%v)", q.bin, q.ExitErr())
	default:
	}
	if err := send(); err != nil {
		q.Kill()
		return fmt.Errorf("poweroff: %w", err)
	}
	select {
	case <-q.done:
		q.Cleanup()
		if e := q.ExitErr(); e != nil {
			return fmt.Errorf("poweroff: %s exit: %v\n%s", q.bin, e, q.LogTail(30))
		}
		return nil
	case <-time.After(timeout):
		t := q.LogTail(30)
		q.Kill()
		return fmt.Errorf("poweroff: %s still running after %v\n%s", q.bin, timeout, t)
	}
}

// Cleanup removes the VM's temporary files.
func (q *QEMU) Cleanup() {
	if q.tmpDir != "" {
		os.RemoveAll(q.tmpDir)
	}
}

// Kill ends QEMU (SIGKILL), waits up to 10 s for it to be reaped and
// removes the VM's temporary files. Safe to call more than once and after
// it exited.
func (q *QEMU) Kill() {
	defer q.Cleanup()
	q.killOnce.Do(func() {
		select {
		case <-q.done:
		default:
			q.cmd.Process.Kill()
			select {
			case <-q.done:
			case <-time.After(10 * time.Second):
			}
		}
	})
}
