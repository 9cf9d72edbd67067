package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gprobes/gprobes/gdbremote"
	"github.com/gprobes/gprobes/ppdf"
)

// Limits bound what one client can make the daemon hold: request bodies,
// headers, connections, and the time each of them may take. docs/api.md
// ("Limits") says why each is what it is. A zero field takes its default.
type Limits struct {
	// MaxModule is the largest PPDF /v1/insert takes, in bytes (default
	// DefaultMaxModule; at most ppdf.MaxFileSize).
	MaxModule int64
	// StubTimeout bounds connecting to a GDB stub, its handshake and each
	// of its replies (default gdbremote.DefaultTimeout).
	StubTimeout time.Duration
	// Route is engine.RouteAuto (jump pads in processes where safe) or
	// engine.RouteInt3.
	Route string
	// RingSize is engine.Options.RingSize for every target but the
	// kernel, which takes KernelRingSize (0: its own default).
	RingSize       int
	KernelRingSize int

	ReadHeaderTimeout time.Duration // request line and headers
	ReadTimeout       time.Duration // the whole request, body included
	IdleTimeout       time.Duration // a kept-alive connection between requests
	// WriteTimeout bounds writing a response (each write of the log
	// stream, which has no end).
	WriteTimeout   time.Duration
	MaxHeaderBytes int
	// MaxConns is how many connections are served at once; past it the
	// longest idle one is closed, or the new one is refused with 503.
	MaxConns int
}

// Defaults of Limits.
const (
	// DefaultMaxModule: a large module, a probe on every function of a
	// distribution vmlinux (some 60000 probes at the ~250 bytes each of
	// ppdf/testdata/full.ppdf, program and line table included), is about
	// 15 MB; 64 MiB leaves room for four times that. The format itself
	// allows ppdf.MaxFileSize (4 GiB).
	DefaultMaxModule         = 64 << 20
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 60 * time.Second
	DefaultIdleTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 60 * time.Second
	// DefaultMaxHeaderBytes: a query string carries at most a module name
	// (ppdf.MaxString, 64 KiB, three times that percent-encoded).
	DefaultMaxHeaderBytes = 256 << 10
	DefaultMaxConns       = 128

	// maxRemoveBody: every minor (65536 of them, "65535," each) and the
	// longest module name JSON-escaped (6 bytes a byte) fit in 1 MiB.
	maxRemoveBody = 1 << 20
	// noBody: the endpoints that take no body refuse any.
	noBody = 0
	// insertOverhead: the JSON around the PPDF (target, mode, symbol
	// paths, KASLR offset).
	insertOverhead = 1 << 20
	// bigModule: past this size decodeInsert hands the request's memory
	// back before the module is decoded.
	bigModule = 4 << 20
)

func orDefault[T int | int64 | time.Duration](v, d T) T {
	if v > 0 {
		return v
	}
	return d
}

func (l *Limits) maxModule() int64 {
	return min(orDefault(l.MaxModule, DefaultMaxModule), int64(ppdf.MaxFileSize))
}

// maxInsertBody is the largest /v1/insert body: the module base64-encoded
// as JSON encodes bytes, and the rest of the request.
func (l *Limits) maxInsertBody() int64 {
	return int64(base64.StdEncoding.EncodedLen(int(l.maxModule()))) + insertOverhead
}

func (l *Limits) stubTimeout() time.Duration {
	return orDefault(l.StubTimeout, gdbremote.DefaultTimeout)
}

func (l *Limits) writeTimeout() time.Duration { return orDefault(l.WriteTimeout, DefaultWriteTimeout) }

func (l *Limits) maxConns() int { return orDefault(l.MaxConns, DefaultMaxConns) }

// httpServer is the daemon's http.Server. It has no WriteTimeout: that
// would cut `log --follow`, which never ends; each handler bounds its
// writes instead (bounded, streaming).
func (l *Limits) httpServer(h http.Handler, cl *connLimiter) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: orDefault(l.ReadHeaderTimeout, DefaultReadHeaderTimeout),
		ReadTimeout:       orDefault(l.ReadTimeout, DefaultReadTimeout),
		IdleTimeout:       orDefault(l.IdleTimeout, DefaultIdleTimeout),
		MaxHeaderBytes:    orDefault(l.MaxHeaderBytes, DefaultMaxHeaderBytes),
		ConnState:         cl.state,
	}
}

// bounded wraps a handler: its request body may be at most limit bytes
// (refused with 413 before it is read when Content-Length says more, cut
// there otherwise; with limit noBody, any body is refused), and writing
// its response may take WriteTimeout from when the response starts: an
// insert that takes long (100 fentry probes in a slow guest took a minute)
// still gets its answer to the client.
func (s *Server) bounded(limit int64, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !bodyFits(w, r, limit) {
			return
		}
		h(&lateDeadline{ResponseWriter: w, rc: http.NewResponseController(w), d: s.Limits.writeTimeout()}, r)
	}
}

// lateDeadline sets the connection's write deadline when the response
// begins (its header or its first write), not when the request came.
type lateDeadline struct {
	http.ResponseWriter
	rc  *http.ResponseController
	d   time.Duration
	set bool
}

func (w *lateDeadline) arm() {
	if !w.set {
		w.set = true
		w.rc.SetWriteDeadline(time.Now().Add(w.d))
	}
}

func (w *lateDeadline) WriteHeader(code int) { w.arm(); w.ResponseWriter.WriteHeader(code) }

func (w *lateDeadline) Write(b []byte) (int, error) { w.arm(); return w.ResponseWriter.Write(b) }

// Unwrap lets http.ResponseController reach the connection.
func (w *lateDeadline) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// streaming wraps the log handler: the request has no body, and the
// response may last as long as the client follows. The read deadline of
// ReadTimeout is lifted (the server would cancel the request when it
// passes), and every write must go through within WriteTimeout instead: a
// follower that stops reading is cut off, one that reads is kept.
func (s *Server) streaming(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !bodyFits(w, r, noBody) {
			return
		}
		rc := http.NewResponseController(w)
		rc.SetReadDeadline(time.Time{})
		h(&deadlineWriter{ResponseWriter: w, rc: rc, d: s.Limits.writeTimeout()}, r)
	}
}

// deadlineWriter gives each write (and flush) of a response its own
// deadline.
type deadlineWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	w.rc.SetWriteDeadline(time.Now().Add(w.d))
	return w.ResponseWriter.Write(p)
}

func (w *deadlineWriter) Flush() {
	w.rc.SetWriteDeadline(time.Now().Add(w.d))
	w.rc.Flush()
}

func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// bodyFits refuses a request whose body is over limit (413) and bounds
// what is read of the others.
func bodyFits(w http.ResponseWriter, r *http.Request, limit int64) bool {
	switch {
	case limit == noBody && r.ContentLength != 0:
		writeErr(w, http.StatusRequestEntityTooLarge, fmt.Errorf("%s takes no request body", r.URL.Path))
		return false
	case r.ContentLength > limit:
		writeErr(w, http.StatusRequestEntityTooLarge, fmt.Errorf("%s: the request body is %d bytes, more than the %d this endpoint takes", r.URL.Path, r.ContentLength, limit))
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	return true
}

// readBody reads a whole request body (bounded by bounded's
// MaxBytesReader) into one buffer of its exact size when its length is
// known.
func readBody(r *http.Request, what string) ([]byte, int, error) {
	var b []byte
	var err error
	if r.ContentLength >= 0 {
		b = make([]byte, r.ContentLength)
		_, err = io.ReadFull(r.Body, b)
	} else {
		b, err = io.ReadAll(r.Body)
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("%s: the request body is more than the %d bytes this endpoint takes", what, mbe.Limit)
		}
		return nil, http.StatusBadRequest, fmt.Errorf("%s: reading the request: %w", what, err)
	}
	return b, http.StatusOK, nil
}

// decodeBody reads a JSON request body into v. Its errors never quote the
// body.
func decodeBody(w http.ResponseWriter, r *http.Request, what string, v any) (int, error) {
	b, code, err := readBody(r, what)
	if err != nil {
		return code, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return http.StatusBadRequest, fmt.Errorf("%s: bad request: %w", what, jsonErr(err))
	}
	return http.StatusOK, nil
}

// jsonErr keeps what a JSON error says about where and what type, without
// any of the request's text.
func jsonErr(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("invalid JSON at byte %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Errorf("field %s: want %v, not a JSON %s", te.Field, te.Type, te.Value)
	}
	return errors.New(short(err.Error()))
}

// decodeInsert reads an insert request. The PPDF is base64 in the JSON;
// decoding it the ordinary way (json.Decoder into []byte) holds the body
// several times over (the decoder's growing buffer, the unquoted string,
// the decoded bytes): a 1 GiB request took 4.7 GB. Here the body is read
// once into a buffer of its size and the base64 is decoded from it into
// one slice of the module's size (ppdfField).
//
// The body must come with its length (Content-Length; 411 otherwise): a
// body of unknown length would be read into a growing buffer, twice its
// size at the last growth.
func (s *Server) decodeInsert(w http.ResponseWriter, r *http.Request) (*InsertRequest, int, error) {
	if r.ContentLength < 0 {
		return nil, http.StatusLengthRequired, errors.New("insert: the request must say its length (Content-Length), not be chunked")
	}
	b, code, err := readBody(r, "insert")
	if err != nil {
		return nil, code, err
	}
	var wire struct {
		InsertRequest
		PPDF ppdfField `json:"ppdf"`
	}
	if err := json.Unmarshal(b, &wire); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("insert: bad request: %w", jsonErr(err))
	}
	b = nil
	if int64(len(wire.PPDF)) > s.Limits.maxModule() {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("insert: the module is %d bytes, more than the daemon's limit of %d (gprobes daemon --max-module)", len(wire.PPDF), s.Limits.maxModule())
	}
	req := wire.InsertRequest
	req.PPDF = wire.PPDF
	if len(req.PPDF) > bigModule {
		// The request's bytes are garbage now: collect them so that the
		// module ppdf.Decode makes next takes their pages rather than new
		// ones (peak RSS: request + module, not request + 2 modules).
		runtime.GC()
	}
	return &req, http.StatusOK, nil
}

// ppdfField decodes a base64 JSON string straight from the request's
// bytes.
type ppdfField []byte

func (f *ppdfField) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		*f = nil
		return nil
	}
	if len(data) < 2 || data[0] != '"' || data[len(data)-1] != '"' {
		return errors.New("ppdf: want a base64 string")
	}
	src := data[1 : len(data)-1]
	if bytes.IndexByte(src, '\\') >= 0 {
		// escapes ("\/" is valid JSON for "/"): the ordinary, costlier way
		var b []byte
		if err := json.Unmarshal(data, &b); err != nil {
			return errors.New("ppdf: not valid base64")
		}
		*f = b
		return nil
	}
	out := make([]byte, base64.StdEncoding.DecodedLen(len(src)))
	n, err := base64.StdEncoding.Decode(out, src)
	if err != nil {
		return fmt.Errorf("ppdf: not valid base64: %w", err)
	}
	*f = out[:n]
	return nil
}

// short quotes a string from a request for an error message, cut to a
// length a message can carry.
func short(s string) string {
	const max = 200
	if len(s) > max {
		return fmt.Sprintf("%q... (%d bytes)", s[:max], len(s))
	}
	return fmt.Sprintf("%q", s)
}

// openError says why a target did not open; a GDB stub that never
// answered says so plainly.
func (s *Server) openError(spec string, err error) error {
	if errors.Is(err, gdbremote.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("target %s: the stub did not answer within %v (gprobes daemon --stub-timeout): is it a GDB stub, and is no other debugger attached? %w", short(spec), s.Limits.stubTimeout(), err)
	}
	return err
}

// connLimiter is the daemon's listener: it serves at most max connections
// at once. At the limit a new connection takes the place of the longest
// idle one (kept alive between requests, or connected and silent); when
// every connection is busy in a request (log followers, say) the new one
// is answered 503 and closed.
type connLimiter struct {
	net.Listener
	max      int
	mu       sync.Mutex
	conns    map[net.Conn]*connInfo
	refusing atomic.Int32 // refusals being answered
}

// maxRefusing bounds the connections being answered 503 at once (each for
// 2 s at most); past it a connection is closed without an answer.
const maxRefusing = 64

type connInfo struct {
	busy  bool      // in a request
	since time.Time // idle since
}

func newConnLimiter(ln net.Listener, max int) *connLimiter {
	return &connLimiter{Listener: ln, max: max, conns: map[net.Conn]*connInfo{}}
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if len(l.conns) >= l.max {
			var victim net.Conn
			var oldest time.Time
			for vc, ci := range l.conns {
				if !ci.busy && (victim == nil || ci.since.Before(oldest)) {
					victim, oldest = vc, ci.since
				}
			}
			if victim == nil {
				l.mu.Unlock()
				if l.refusing.Add(1) > maxRefusing {
					c.Close() // a flood: no answer, no goroutine
					l.refusing.Add(-1)
					continue
				}
				go func() {
					refuse(c, l.max)
					l.refusing.Add(-1)
				}()
				continue
			}
			delete(l.conns, victim)
			victim.Close()
		}
		l.conns[c] = &connInfo{since: time.Now()}
		l.mu.Unlock()
		return c, nil
	}
}

// state follows the server's view of each connection (http.Server's
// ConnState).
func (l *connLimiter) state(c net.Conn, st http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ci := l.conns[c]
	if ci == nil {
		return
	}
	switch st {
	case http.StateActive:
		ci.busy = true
	case http.StateIdle:
		ci.busy, ci.since = false, time.Now()
	case http.StateClosed, http.StateHijacked:
		delete(l.conns, c)
	}
}

// count is how many connections are open.
func (l *connLimiter) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// refuse answers 503 on a connection past the limit: after its request's
// head (a client may not take an answer to a request it has not sent),
// read with a small bound in size and time.
func refuse(c net.Conn, max int) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	http.ReadRequest(bufio.NewReader(io.LimitReader(c, 64<<10)))
	body := fmt.Sprintf("{\"error\":\"the gprobes daemon serves %d connections at once, all busy: try again\"}\n", max)
	fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
}

// fileID identifies a file: device and inode.
type fileID struct{ dev, ino uint64 }

func lstatID(path string) (*fileID, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return nil, err
	}
	return &fileID{dev: uint64(st.Dev), ino: st.Ino}, nil
}

// clearStaleSocket makes room for the daemon's socket at path. Only a
// socket with no daemon behind it is removed; a live socket, and anything
// that is not a socket (a regular file, a directory, a symbolic link,
// whatever it points to), is an error and is left as it is.
func clearStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("socket %s: %w", path, err)
	}
	if fi.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("socket %s: %s is there and is not a socket; it is left as it is: remove it, or choose another path with --socket or GPROBES_SOCKET", path, describeMode(fi.Mode()))
	}
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("a gprobes daemon is already serving %s", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("socket %s: cannot tell whether a daemon serves it: %w", path, err)
	}
	// a socket nobody listens on: a daemon that died left it
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("socket %s: removing the stale socket: %w", path, err)
	}
	return nil
}

func describeMode(m os.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&os.ModeSymlink != 0:
		return "a symbolic link"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return "a file of type " + m.Type().String()
}

// removeSocketIfOurs removes the socket at path if it is still the one
// this daemon created (same device and inode): another daemon may have
// taken the path since.
func removeSocketIfOurs(path string, id *fileID) {
	if cur, err := lstatID(path); err == nil && *cur == *id {
		os.Remove(path)
	}
}
