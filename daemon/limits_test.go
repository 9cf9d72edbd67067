package daemon

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testServer runs a daemon on a socket in a short temporary folder (socket
// paths are limited to 107 bytes) and returns it with its socket.
func testServer(t *testing.T, lim Limits) (*Server, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "gpd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s")
	s, err := New(sock, filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	s.Limits = lim
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() { s.Shutdown() })
		<-served
	})
	return s, sock
}

// rawRequest sends a request with the given body reader (its length
// given by n, or -1 for chunked) and returns the status and body.
func rawRequest(t *testing.T, sock, method, path string, body io.Reader, n int64) (int, string) {
	t.Helper()
	c := NewClient(sock)
	req, err := http.NewRequest(method, "http://gprobes"+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = n
	if n < 0 {
		req.TransferEncoding = []string{"chunked"}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// fakeStub accepts GDB remote connections and never answers; it counts
// the connections and what they sent.
type fakeStub struct {
	ln      net.Listener
	accepts atomic.Int32
}

func newFakeStub(t *testing.T) *fakeStub {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeStub{ln: ln}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.accepts.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go io.Copy(io.Discard, c) // read everything, answer nothing
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return f
}

func (f *fakeStub) target() string { return "gdb:" + f.ln.Addr().String() }

// An insert into a GDB stub that accepts the connection and never answers
// holds up no other request: status, query, getvars, log, remove, and an
// insert into another target all answer while it is pending. A second
// insert into the same stub waits for that one open (no second
// connection) and gets its error, which says the stub did not answer.
func TestStuckStubDoesNotStallOthers(t *testing.T) {
	// the window in which every other request must answer (-short: the
	// fast loop waits less for the stuck insert to fail)
	stubTimeout := 15 * time.Second
	if testing.Short() {
		stubTimeout = 6 * time.Second
	}
	s, sock := testServer(t, Limits{StubTimeout: stubTimeout})
	stub := newFakeStub(t)
	c := NewClient(sock)
	mod := testModule(t)

	type result struct {
		err  error
		took time.Duration
	}
	insert := func() chan result {
		ch := make(chan result, 1)
		go func() {
			start := time.Now()
			_, err := c.Insert(InsertRequest{Target: stub.target(), PPDF: mod})
			ch <- result{err, time.Since(start)}
		}()
		return ch
	}
	first := insert()
	// wait until the daemon has connected to the stub
	for deadline := time.Now().Add(time.Minute); stub.accepts.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not connect to the stub")
		}
	}
	second := insert()

	// every other request answers while the insert is stuck
	others := []struct {
		name string
		do   func() error
	}{
		{"status", func() error {
			st, err := c.Status()
			if err == nil && st.Targets[stub.target()] != "opening" {
				err = fmt.Errorf("targets %v: want %s opening", st.Targets, stub.target())
			}
			return err
		}},
		{"query", func() error { _, err := c.Probes(""); return err }},
		{"getvars", func() error { _, err := c.Vars("", false); return err }},
		{"getvars --reset", func() error { _, err := c.Vars("", true); return err }},
		{"log", func() error {
			code, body := rawRequest(t, sock, "GET", "/v1/log", nil, 0)
			if code != http.StatusOK {
				return fmt.Errorf("%d %s", code, body)
			}
			return nil
		}},
		{"remove --all", func() error { _, err := c.Remove(RemoveRequest{All: true}); return err }},
		{"remove NAME", func() error {
			_, err := c.Remove(RemoveRequest{Module: "nosuch"})
			if err == nil || !strings.Contains(err.Error(), "no module") {
				return fmt.Errorf("want no module, got %v", err)
			}
			return nil
		}},
		{"insert into another target", func() error {
			_, err := c.Insert(InsertRequest{Target: "pid:2147483646", PPDF: mod})
			if err == nil {
				return errors.New("insert into a process that does not exist succeeded")
			}
			return nil
		}},
	}
	for _, o := range others {
		done := make(chan error, 1)
		go func() { done <- o.do() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: %v", o.name, err)
			}
		case <-time.After(stubTimeout / 2):
			t.Fatalf("%s did not answer while the insert into the stuck stub was pending", o.name)
		}
		select {
		case r := <-first:
			t.Fatalf("the insert into the stub that never answers returned before %s was done: %v", o.name, r.err)
		default: // still pending: the answer came while it was stuck
		}
	}

	for i, ch := range []chan result{first, second} {
		select {
		case r := <-ch:
			if r.err == nil || !strings.Contains(r.err.Error(), "did not answer within") {
				t.Errorf("insert %d: %v, want the stub did not answer within", i+1, r.err)
			}
		case <-time.After(stubTimeout + 30*time.Second):
			t.Fatalf("insert %d into the stub that never answers did not end", i+1)
		}
	}
	if n := stub.accepts.Load(); n != 1 {
		t.Errorf("the daemon connected %d times to the stub, want once for both inserts", n)
	}
	st, err := c.Status()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.Targets[stub.target()]; ok {
		t.Errorf("the stub whose open failed is still a target: %v", st.Targets)
	}
	_ = s
}

// Shutdown during a stuck open waits for it (bounded by the stub timeout)
// and leaves no target behind; the insert is told why.
func TestShutdownDuringStuckOpen(t *testing.T) {
	s, sock := testServer(t, Limits{StubTimeout: 3 * time.Second})
	stub := newFakeStub(t)
	c := NewClient(sock)
	done := make(chan error, 1)
	go func() {
		_, err := c.Insert(InsertRequest{Target: stub.target(), PPDF: testModule(t)})
		done <- err
	}()
	for deadline := time.Now().Add(time.Minute); stub.accepts.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not connect to the stub")
		}
	}
	sd := make(chan error, 1)
	go func() { sd <- s.Shutdown() }()
	select {
	case <-sd:
	case <-time.After(60 * time.Second):
		t.Fatal("Shutdown did not end")
	}
	if err := <-done; err == nil {
		t.Error("the insert into the stub that never answers succeeded")
	}
	s.mu.Lock()
	n := len(s.targets)
	s.mu.Unlock()
	if n != 0 {
		t.Errorf("%d targets left after Shutdown", n)
	}
	if _, err := c.Insert(InsertRequest{Target: stub.target(), PPDF: testModule(t)}); err == nil {
		t.Error("an insert after Shutdown succeeded")
	}
}

// testModule is a small valid PPDF.
func testModule(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../ppdf/testdata/tiny.ppdf")
	if err == nil {
		return b
	}
	t.Fatalf("no test module: %v", err)
	return nil
}

// allocated runs f and returns the bytes it allocated in this process.
func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// filler reads n bytes of JSON {"module":"aaa...", with no end, without
// allocating.
type filler struct {
	n, off int64
	head   string
}

func (f *filler) Read(p []byte) (int, error) {
	if f.off >= f.n {
		return 0, io.EOF
	}
	k := int64(len(p))
	if k > f.n-f.off {
		k = f.n - f.off
	}
	for i := int64(0); i < k; i++ {
		if pos := f.off + i; pos < int64(len(f.head)) {
			p[i] = f.head[pos]
		} else {
			p[i] = 'a'
		}
	}
	f.off += k
	return int(k), nil
}

// An oversized body is refused, with or without Content-Length, without
// the daemon holding it, and the error does not echo it.
func TestOversizedBodies(t *testing.T) {
	_, sock := testServer(t, Limits{MaxModule: 1 << 20})
	const big = 256 << 20
	cases := []struct {
		path string
		head string
	}{
		{"/v1/remove", `{"module":"`},
		{"/v1/insert", `{"target":"pid:1","ppdf":"`},
		{"/v1/vars/reset", `{"module":"`},
	}
	for _, tc := range cases {
		for _, n := range []int64{big, -1} {
			var code int
			var body string
			alloc := allocated(func() {
				f := &filler{n: big, head: tc.head}
				code, body = rawRequest(t, sock, "POST", tc.path, f, n)
			})
			want := http.StatusRequestEntityTooLarge
			if tc.path == "/v1/insert" && n < 0 {
				want = http.StatusLengthRequired
			}
			if code != want {
				t.Errorf("%s, length %d: status %d %.200s, want %d", tc.path, n, code, body, want)
			}
			if len(body) > 1024 || strings.Contains(body, "aaaaaaaa") {
				t.Errorf("%s: the error echoes the body (%d bytes): %.200s", tc.path, len(body), body)
			}
			if alloc > 32<<20 {
				t.Errorf("%s, length %d: the daemon allocated %d MiB for a refused body of %d MiB", tc.path, n, alloc>>20, big>>20)
			}
		}
	}
	// a module under the body limit but over MaxModule once decoded is
	// refused too, saying so
	ppdf := make([]byte, 1<<20+1)
	b, _ := json.Marshal(InsertRequest{Target: "pid:1", PPDF: ppdf})
	code, body := rawRequest(t, sock, "POST", "/v1/insert", bytes.NewReader(b), int64(len(b)))
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(body, "--max-module") {
		t.Errorf("a module over the limit: %d %s", code, body)
	}
	// the client says why, rather than a broken pipe
	_, err := NewClient(sock).Insert(InsertRequest{Target: "pid:1", PPDF: make([]byte, 4<<20)})
	if err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("client insert of a module over the limit: %v", err)
	}
	// and the daemon still serves
	if _, err := NewClient(sock).Status(); err != nil {
		t.Fatal(err)
	}
}

// A large insert costs the daemon about the request's size plus the
// module's, not several times that (json.Decoder into []byte: 4.7 times
// for 1 GiB).
func TestInsertDecodeMemory(t *testing.T) {
	const n = 48 << 20
	_, sock := testServer(t, Limits{})
	mod := make([]byte, n)
	for i := range mod {
		mod[i] = byte(i * 7)
	}
	b, _ := json.Marshal(InsertRequest{Target: "pid:2147483646", PPDF: mod})
	mod = nil
	var code int
	var body string
	alloc := allocated(func() {
		code, body = rawRequest(t, sock, "POST", "/v1/insert", bytes.NewReader(b), int64(len(b)))
	})
	if code != http.StatusBadRequest || !strings.Contains(body, "insert") {
		t.Fatalf("insert of a module that is not a PPDF: %d %.300s", code, body)
	}
	// the body (4/3 n) and the decoded module (n), and some slack
	if limit := uint64(len(b)) + n + n/4; alloc > limit {
		t.Errorf("decoding a %d MiB insert allocated %d MiB, more than %d MiB", n>>20, alloc>>20, limit>>20)
	}
	t.Logf("a %d MiB module (%d MiB request) allocated %d MiB", n>>20, len(b)>>20, alloc>>20)
}

// A JSON string with escapes is still read right.
func TestPPDFFieldEscapes(t *testing.T) {
	want := []byte{0xfb, 0xff, 0xfe, 1, 2, 3}
	enc := base64.StdEncoding.EncodeToString(want)
	for _, raw := range []string{`"` + enc + `"`, `"` + strings.ReplaceAll(enc, "/", `\/`) + `"`, "null"} {
		var f ppdfField
		if err := json.Unmarshal([]byte(raw), &f); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if raw != "null" && !bytes.Equal(f, want) {
			t.Errorf("%s: %x, want %x", raw, []byte(f), want)
		}
	}
	var f ppdfField
	if err := json.Unmarshal([]byte(`"not base64!"`), &f); err == nil {
		t.Error("bad base64 accepted")
	}
}

// The server closes connections that send nothing, send their headers or
// body too slowly, or sit idle after a request; a log follower is kept
// past all those timeouts (the write timeout included: it bounds each
// write, not the stream) and gets the records committed later.
func TestSlowAndIdleConnectionsClosed(t *testing.T) {
	lim := Limits{ReadHeaderTimeout: 500 * time.Millisecond, ReadTimeout: time.Second, IdleTimeout: 500 * time.Millisecond,
		WriteTimeout: 500 * time.Millisecond}
	s, sock := testServer(t, lim)
	const closeWithin = 15 * time.Second
	dial := func() net.Conn {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// closedByServer reads until EOF (or a reset); it fails if the
	// connection is still open after closeWithin.
	closedByServer := func(what string, c net.Conn) {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(closeWithin))
		_, err := io.Copy(io.Discard, c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("%s: the connection is still open after %v", what, closeWithin)
		}
	}
	// dribble writes s a byte at a time until the connection fails
	dribble := func(c net.Conn, s string) {
		go func() {
			for i := 0; ; i++ {
				if _, err := c.Write([]byte{s[i%len(s)]}); err != nil {
					return
				}
				time.Sleep(100 * time.Millisecond) // the pace of a slow client, not a wait
			}
		}()
	}

	closedByServer("silent", dial())

	c := dial()
	dribble(c, "GET /v1/status HTTP/1.1\r\nHost: gprobes\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	closedByServer("slow headers", c)

	c = dial()
	fmt.Fprintf(c, "POST /v1/remove HTTP/1.1\r\nHost: gprobes\r\nContent-Length: 100000\r\n\r\n")
	dribble(c, `{"module":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa`)
	closedByServer("slow body", c)

	c = dial()
	fmt.Fprintf(c, "GET /v1/status HTTP/1.1\r\nHost: gprobes\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status: %d", resp.StatusCode)
	}
	c.SetReadDeadline(time.Now().Add(closeWithin))
	if _, err := io.Copy(io.Discard, br); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("idle keep-alive connection still open after %v", closeWithin)
		}
	}

	// a follower outlives ReadTimeout and IdleTimeout and still gets records
	c = dial()
	fmt.Fprintf(c, "GET /v1/log?follow=1 HTTP/1.1\r\nHost: gprobes\r\n\r\n")
	resp, err = http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	// (its body is not closed: that would read the endless stream; the
	// connection is closed at cleanup)
	got := make(chan string, 2)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.Contains(sc.Text(), `"late`) {
				got <- sc.Text()
			}
		}
		got <- fmt.Sprintf("cut off: %v", sc.Err())
	}()
	// past every timeout above, twice: the stream is still open after
	// the first record
	for _, mod := range []string{"late1", "late2"} {
		time.Sleep(2 * time.Second)
		s.log.Write(&LogLine{Time: time.Now(), Kind: "log", Target: "pid:1", Module: mod})
		select {
		case l := <-got:
			if !strings.Contains(l, `"module":"`+mod+`"`) {
				t.Fatalf("the follower, waiting for %s: %s", mod, l)
			}
		case <-time.After(closeWithin):
			t.Fatalf("the follower did not get %s", mod)
		}
	}
}

// At the connection limit, a new client is served: the longest idle
// connection makes room; when every connection is busy the new one gets
// a 503 that says why.
func TestConnectionLimit(t *testing.T) {
	const max = 8
	s, sock := testServer(t, Limits{MaxConns: max, IdleTimeout: time.Hour, ReadHeaderTimeout: time.Hour})
	var idle []net.Conn
	for i := 0; i < 5*max; i++ {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	// a real client is served although many connections sit idle
	done := make(chan error, 1)
	go func() { _, err := NewClient(sock).Status(); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a client was not served while idle connections held every slot")
	}
	if n := s.ln.(*connLimiter).count(); n > max {
		t.Errorf("%d connections open, limit %d", n, max)
	}
	for _, c := range idle {
		c.Close()
	}
	// every slot busy following the log: a new client is told
	for i := 0; i < max; i++ {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /v1/log?follow=1 HTTP/1.1\r\nHost: gprobes\r\n\r\n")
		if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
			t.Fatal(err)
		}
	}
	_, err := NewClient(sock).Status()
	if err == nil || !strings.Contains(err.Error(), "connections at once") {
		t.Errorf("with every slot busy: %v, want a 503 saying so", err)
	}
}

// Only a socket is ever removed: a regular file, a directory or a
// symbolic link at the socket path is an error and stays as it was; a
// stale socket is replaced, a live one is an error; Shutdown removes the
// socket only if it is still ours.
func TestSocketPathSafety(t *testing.T) {
	dir, err := os.MkdirTemp("", "gpd")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	state := filepath.Join(dir, "state")
	listen := func(path string) (*Server, error) {
		s, err := New(path, state)
		if err != nil {
			t.Fatal(err)
		}
		return s, s.Listen()
	}

	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("precious"), 0o644)
	if _, err := listen(file); err == nil || !strings.Contains(err.Error(), "not a socket") || !strings.Contains(err.Error(), "regular file") {
		t.Errorf("regular file: %v", err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "precious" {
		t.Errorf("the regular file at the socket path: %q %v", b, err)
	}

	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o755)
	if _, err := listen(sub); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("directory: %v", err)
	}
	if st, err := os.Stat(sub); err != nil || !st.IsDir() {
		t.Errorf("the directory: %v", err)
	}

	// a stale socket (nobody listens) is replaced
	stale := filepath.Join(dir, "stale")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	// a symbolic link, even to a stale socket, is left alone
	link := filepath.Join(dir, "link")
	os.Symlink(stale, link)
	if _, err := listen(link); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("symbolic link: %v", err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link: %v", err)
	}
	if fi, err := os.Lstat(stale); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Errorf("the socket behind the link: %v", err)
	}

	s1, err := listen(stale)
	if err != nil {
		t.Fatalf("stale socket: %v", err)
	}
	go s1.Serve()
	// a live one is an error, and stays
	if _, err := listen(stale); err == nil || !strings.Contains(err.Error(), "already serving") {
		t.Errorf("live socket: %v", err)
	}
	if _, err := NewClient(stale).Status(); err != nil {
		t.Errorf("the live daemon after a second one tried its socket: %v", err)
	}
	// the path taken by something else before Shutdown: left alone
	os.Remove(stale)
	os.WriteFile(stale, []byte("other"), 0o644)
	s1.Shutdown()
	if b, err := os.ReadFile(stale); err != nil || string(b) != "other" {
		t.Errorf("Shutdown removed what was no longer its socket: %q %v", b, err)
	}
	os.Remove(stale)
	// and its own socket it removes
	s2, err := listen(stale)
	if err != nil {
		t.Fatal(err)
	}
	go s2.Serve()
	s2.Shutdown()
	if _, err := os.Lstat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Shutdown left its socket: %v", err)
	}
}
