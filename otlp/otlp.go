package otlp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/daemon"
	"github.com/gprobes/gprobes/internal/shm"
)

// Defaults of Options (and of gprobes daemon --otlp-queue, --otlp-retry).
const (
	DefaultQueue    = 8 << 20
	DefaultRetry    = 30 * time.Second
	DefaultInterval = time.Second
	// ShutdownTimeout is what Shutdown gives the forwarder to send what
	// it still has, at most.
	ShutdownTimeout = 5 * time.Second
)

// Options configure an Exporter.
type Options struct {
	// Socket is the daemon's socket, where the forwarder asks for the
	// probes' formats (format = "...": a record's body); "" for none
	Socket string
	// URL is the receiver: grpc://HOST:PORT (plain gRPC, the collector's
	// port 4317), grpcs://HOST:PORT (gRPC over TLS), http://HOST:PORT[/PATH]
	// or https://... (OTLP/HTTP protobuf; PATH defaults to /v1/logs).
	URL string
	// Queue is the room, in bytes, for records waiting for the forwarder
	// (a record of the log stream takes its line's length and 4; the SDK's own
	// queue of 8192 records comes after). A record that does not fit is
	// dropped and counted. 0 is DefaultQueue; it is rounded up to a power
	// of two.
	Queue int
	// Retry is how long a batch the receiver did not take (unreachable,
	// UNAVAILABLE, 429, 502, 503, 504) is sent again, with exponential
	// backoff from 1 s, before its records are counted as dropped. 0 is
	// DefaultRetry; negative sends each batch once.
	Retry time.Duration
	// Interval is how often a batch is sent when fewer than 512 records
	// are waiting. 0 is DefaultInterval.
	Interval time.Duration
	// Warn, when set, is told when records start being dropped, when
	// sending resumes, what the forwarder has to say, and at Shutdown what
	// was sent (the daemon prints it on its standard error).
	Warn func(string)
	// Version is the service.version of the records' resource.
	Version string
	// Forwarder is the command line that starts the forwarder process,
	// its options (JSON) added as its last argument. Default: this
	// program, "otlp-forward" (gprobes' hidden command).
	Forwarder []string
}

// Exporter is the daemon's side: a daemon.Exporter that puts records in
// the ring and runs the forwarder that sends them.
type Exporter struct {
	endpoint string
	opts     Options
	warn     func(string)

	mem     *shm.Mem
	memFile *os.File // the memfd, passed to each forwarder
	ring    *ring
	mu      sync.Mutex // one writer of the ring at a time

	closed    atomic.Bool
	queueFull atomic.Uint64 // records the ring had no room for
	failed    atomic.Uint64 // records the forwarder could not send, or lost
	lost      daemon.Losses // every dropped record, per probe, with the first and last reason

	stop    chan struct{} // Shutdown began
	stopped chan struct{} // the supervisor ended: no forwarder runs
	child   *child        // the forwarder running (supervisor's)
	childMu sync.Mutex

	monitorMu sync.Mutex
	failing   bool   // records are being dropped (an episode, for Warn)
	droppedAt uint64 // dropped count when the episode began
}

var _ daemon.Exporter = (*Exporter)(nil)

var (
	errQueueFull = errors.New("the OTLP queue is full (the receiver, or the forwarder, is slower than the probes)")
	errShutdown  = errors.New("not sent before the daemon stopped")
)

// New checks the URL, makes the ring and starts the forwarder. Nothing is
// sent yet: an unreachable receiver is an error of the first export, not
// of New.
func New(o Options) (*Exporter, error) {
	if o.Queue == 0 {
		o.Queue = DefaultQueue
	}
	if o.Queue < 1 || o.Queue > 1<<30 {
		return nil, fmt.Errorf("otlp: a queue of %d bytes: from 1 to 1GiB", o.Queue)
	}
	size := 4096
	for size < o.Queue {
		size <<= 1
	}
	if o.Retry == 0 {
		o.Retry = DefaultRetry
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	endpoint, err := checkURL(o.URL)
	if err != nil {
		return nil, err
	}
	if len(o.Forwarder) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("otlp: the forwarder: %w", err)
		}
		o.Forwarder = []string{exe, "otlp-forward"}
	}
	mem, err := shm.Create("gprobes-otlp", dataOff+size)
	if err != nil {
		return nil, fmt.Errorf("otlp: %w", err)
	}
	if mem.FD < 0 {
		return nil, fmt.Errorf("otlp: %w", errNotSupported)
	}
	r, err := newRing(mem.Bytes, size)
	if err != nil {
		mem.Close()
		return nil, err
	}
	dup, err := unix.Dup(mem.FD)
	if err != nil {
		mem.Close()
		return nil, fmt.Errorf("otlp: %w", err)
	}
	e := &Exporter{endpoint: endpoint, opts: o, warn: o.Warn, mem: mem, memFile: os.NewFile(uintptr(dup), "gprobes-otlp"), ring: r,
		stop: make(chan struct{}), stopped: make(chan struct{})}
	c, err := e.start()
	if err != nil {
		e.memFile.Close()
		mem.Close()
		return nil, err
	}
	go e.supervise(c)
	go e.monitor()
	return e, nil
}

var errNotSupported = errors.New("OpenTelemetry export needs Linux (a memfd shared with the forwarder)")

// checkURL checks an OTLP URL as the forwarder will read it, and returns
// it as status shows it.
func checkURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("otlp: %q: a URL, grpc://HOST:PORT or http://HOST:PORT", raw)
	}
	switch u.Scheme {
	case "grpc", "grpcs":
		if u.Path != "" && u.Path != "/" {
			return "", fmt.Errorf("otlp: %s: a gRPC endpoint has no path", u.Redacted())
		}
		u.Path = ""
	case "http", "https":
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/logs"
		}
	default:
		return "", fmt.Errorf("otlp: %s: the scheme is grpc, grpcs, http or https", u.Redacted())
	}
	return u.Redacted(), nil
}

// Name is "otlp".
func (e *Exporter) Name() string { return "otlp" }

// Export puts the record's line in the ring, or counts the record as
// dropped when the ring has no room. It never blocks on the forwarder.
func (e *Exporter) Export(l *daemon.LogLine, line []byte) {
	e.mu.Lock()
	ok := !e.closed.Load() && e.ring.put(line)
	e.mu.Unlock()
	if !ok {
		e.queueFull.Add(1)
		err := errQueueFull
		if e.closed.Load() {
			err = errShutdown
		}
		e.lost.Add(l.Target, l.Module, l.Minor, err)
	}
}

// child is one forwarder process.
type child struct {
	cmd     *exec.Cmd
	control *os.File      // its standard input: closed, it finishes
	done    chan struct{} // it exited and its reports were all read
	err     error         // how it exited
}

// start starts a forwarder.
func (e *Exporter) start() (*child, error) {
	arg, err := json.Marshal(forwardOptions{URL: e.opts.URL, Socket: e.opts.Socket, Retry: e.opts.Retry, Interval: e.opts.Interval,
		Version: e.opts.Version, Shutdown: ShutdownTimeout - time.Second})
	if err != nil {
		return nil, err
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("otlp: %w", err)
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, fmt.Errorf("otlp: %w", err)
	}
	argv := append(append([]string{}, e.opts.Forwarder...), string(arg))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stderr = ctlR, os.Stderr
	cmd.ExtraFiles = []*os.File{e.memFile, repW} // descriptors 3 and 4
	// a group of its own: a ^C meant for the daemon does not reach it (the
	// daemon's Shutdown tells it to finish, by closing its standard input)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	ctlR.Close()
	repW.Close()
	if err != nil {
		ctlW.Close()
		repR.Close()
		return nil, fmt.Errorf("otlp: start the forwarder: %w", err)
	}
	// its priority, before it has threads of its own (it lowers the rest)
	idle(cmd.Process.Pid)
	c := &child{cmd: cmd, control: ctlW, done: make(chan struct{})}
	go func() {
		e.readReports(repR)
		repR.Close()
		c.err = cmd.Wait()
		close(c.done)
	}()
	e.childMu.Lock()
	e.child = c
	e.childMu.Unlock()
	return c, nil
}

// supervise waits for the forwarder; one that exits before Shutdown
// asked it to is replaced (a second later), the records it had taken and
// not sent counted as dropped.
func (e *Exporter) supervise(c *child) {
	defer close(e.stopped)
	for {
		select {
		case <-c.done:
		case <-e.stop:
			return
		}
		e.settle(fmt.Errorf("the OTLP forwarder exited: %v", c.err))
		e.say(fmt.Sprintf("otlp: the forwarder exited (%v); starting another", c.err))
		select {
		case <-time.After(time.Second):
		case <-e.stop:
			return
		}
		var err error
		for c, err = e.start(); err != nil; c, err = e.start() {
			e.say(err.Error())
			select {
			case <-time.After(10 * time.Second):
			case <-e.stop:
				return
			}
		}
	}
}

// settle counts as dropped the records a forwarder that is gone had taken
// from the ring and neither sent nor reported.
func (e *Exporter) settle(why error) {
	taken, sent := e.ring.load(offTaken), e.ring.load(offSent)
	if f := e.failed.Load(); taken > sent+f {
		n := taken - sent - f
		e.failed.Add(n)
		for range n {
			e.lost.Add("", "", 0, why)
		}
	}
}

// report is a line the forwarder writes on descriptor 4.
type report struct {
	// Lost: records an export did not get accepted, per probe, and why
	Lost  []probeCount `json:"lost,omitempty"`
	Error string       `json:"error,omitempty"`
	// Warn: something to say (an error of the SDK other than an export's)
	Warn string `json:"warn,omitempty"`
}

type probeCount struct {
	Target string `json:"target"`
	Module string `json:"module"`
	Minor  uint16 `json:"minor"`
	N      uint64 `json:"n"`
}

func (e *Exporter) readReports(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var rep report
		if json.Unmarshal(sc.Bytes(), &rep) != nil {
			continue
		}
		if rep.Warn != "" {
			e.say("otlp: " + rep.Warn)
		}
		err := errors.New(rep.Error)
		for _, p := range rep.Lost {
			for range p.N {
				e.lost.Add(p.Target, p.Module, p.Minor, err)
			}
			e.failed.Add(p.N)
		}
	}
}

// monitor says, once a second at most, when records start being dropped
// and when sending resumes.
func (e *Exporter) monitor() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var dropped, sent uint64
	for {
		select {
		case <-t.C:
		case <-e.stopped:
			return
		}
		dropped, sent = e.report(dropped, sent)
	}
}

// report compares the counts with those of the last tick: records dropped
// since begin an episode, records sent and none dropped end it.
func (e *Exporter) report(dropped, sent uint64) (uint64, uint64) {
	e.monitorMu.Lock()
	defer e.monitorMu.Unlock()
	st, nowSent := e.lost.Summary(), e.ring.load(offSent)
	switch {
	case st.Records > dropped && !e.failing:
		e.failing, e.droppedAt = true, dropped
		e.say(fmt.Sprintf("otlp: records are being dropped: %s (%d so far)", st.LastError, st.Records))
	case st.Records == dropped && nowSent > sent && e.failing:
		e.failing = false
		e.say(fmt.Sprintf("otlp: sending to %s again, %d records dropped since the last error began", e.endpoint, st.Records-e.droppedAt))
	}
	return st.Records, nowSent
}

func (e *Exporter) say(msg string) {
	if e.warn != nil {
		e.warn(msg)
	}
}

// Status counts what was sent and dropped.
func (e *Exporter) Status() daemon.ExportStatus {
	put, sent, failed := e.ring.load(offPut), e.ring.load(offSent), e.failed.Load()
	queued := uint64(0)
	if put > sent+failed {
		queued = put - sent - failed
	}
	return daemon.ExportStatus{Endpoint: e.endpoint, Sent: sent, Queued: queued,
		Dropped: e.lost.Summary(), QueueFull: e.queueFull.Load(), Failed: failed}
}

// LostOf is how many records of one probe were dropped.
func (e *Exporter) LostOf(target, module string, minor uint16) uint64 {
	return e.lost.Of(target, module, minor)
}

// Shutdown tells the forwarder to send what it has, waits for it as long
// as ctx lets it (then kills it), and counts what was not sent as
// dropped. It says on Warn what was sent and dropped.
func (e *Exporter) Shutdown(ctx context.Context) error {
	if e.closed.Swap(true) {
		return nil
	}
	close(e.stop)
	<-e.stopped
	e.childMu.Lock()
	c := e.child
	e.childMu.Unlock()
	c.control.Close()
	select {
	case <-c.done:
	case <-ctx.Done():
		c.cmd.Process.Kill()
		<-c.done
	}
	// what the forwarder took and did not account for, then what it
	// never took (still in the ring, each counted against its probe)
	e.settle(errShutdown)
	e.mu.Lock()
	var l daemon.LogLine
	tail := e.ring.load(offTail)
	for {
		rec, after, ok := e.ring.next(tail, nil)
		if !ok {
			break
		}
		l = daemon.LogLine{}
		json.Unmarshal(rec, &l)
		e.lost.Add(l.Target, l.Module, l.Minor, errShutdown)
		e.failed.Add(1)
		tail = after
	}
	e.ring.done(tail, 0)
	e.mu.Unlock()
	e.memFile.Close()
	st := e.Status()
	msg := fmt.Sprintf("otlp: %d records sent to %s", st.Sent, e.endpoint)
	if st.Dropped.Records > 0 {
		msg += fmt.Sprintf(", %d dropped (%d with the queue full, %d not accepted; the last: %s)", st.Dropped.Records, st.QueueFull, st.Failed, st.Dropped.LastError)
	} else {
		msg += ", none dropped"
	}
	e.say(msg)
	if c.err != nil && ctx.Err() == nil {
		return fmt.Errorf("the forwarder: %w", c.err)
	}
	return nil
}
