package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// startDaemonWith starts a daemon with extra flags, as startDaemon does,
// and returns its socket and process.
func startDaemonWith(t *testing.T, args ...string) (string, *exec.Cmd) {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "d.sock")
	d, _ := daemonProcess(t, sock, filepath.Join(dir, "state"), args...)
	return sock, d
}

// neverAnswers is a GDB stub that accepts connections and says nothing.
func neverAnswers(t *testing.T) (addr string, accepts *atomic.Int32) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepts = new(atomic.Int32)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepts.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go io.Copy(io.Discard, c)
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
	return ln.Addr().String(), accepts
}

// A daemon with an insert stuck on a GDB stub that never answers goes on
// serving its other clients: an insert into a live process, query,
// getvars, log and remove all answer while the stuck insert is pending;
// that one fails in the end, saying the stub did not answer.
func TestDaemonStuckStub(t *testing.T) {
	hits := buildHits(t)
	// the window in which every other request must answer; -short (the
	// fast loop) waits less for the stuck insert to fail
	stubTimeout := 20 * time.Second
	if testing.Short() {
		stubTimeout = 8 * time.Second
	}
	sock, _ := startDaemonWith(t, "--stub-timeout", stubTimeout.String())
	addr, accepts := neverAnswers(t)
	target, lines := startLooping(t, hits)
	_, refLines := startLooping(t, hits)
	dir := t.TempDir()
	probe := filepath.Join(dir, "p.dpdf")
	os.WriteFile(probe, []byte(fmt.Sprintf("name = %s\nmodtype = user\nvars = 1\noffset = f_push\nminor = 1\ninc lv,0\nexit 0\n", hits)), 0o644)

	exe, _ := os.Executable()
	stuck := exec.Command(exe, "insert", "--socket", sock, "--target", "gdb:"+addr, probe)
	stuck.Env = append(os.Environ(), "GPROBES_TEST_MAIN=1")
	var stuckOut bytes.Buffer
	stuck.Stdout, stuck.Stderr = &stuckOut, &stuckOut
	if err := stuck.Start(); err != nil {
		t.Fatal(err)
	}
	stuckDone := make(chan error, 1)
	go func() { stuckDone <- stuck.Wait() }()
	t.Cleanup(func() { stuck.Process.Kill() })
	for deadline := time.Now().Add(20 * time.Second); accepts.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not connect to the stub")
		}
	}
	pending := func(what string) {
		t.Helper()
		select {
		case err := <-stuckDone:
			t.Fatalf("the insert into the stub that never answers ended (%v: %s) before %s answered", err, stuckOut.String(), what)
		default:
		}
	}

	mustRun(t, "insert", "--socket", sock, "--target", fmt.Sprintf("pid:%d", target.Process.Pid), probe)
	pending("insert pid:N")
	for i := 0; i < 2; i++ {
		if got, want := roundLine(t, lines), roundLine(t, refLines); got != want {
			t.Fatalf("round %d under probes: %s, want %s", i, got, want)
		}
	}
	if out := mustRun(t, "query", "--socket", sock, hits); !strings.Contains(out, "active") {
		t.Errorf("query:\n%s", out)
	}
	pending("query")
	if out := mustRun(t, "getvars", "--socket", sock, hits); !strings.Contains(out, hits) {
		t.Errorf("getvars:\n%s", out)
	}
	pending("getvars")
	mustRun(t, "log", "--socket", sock)
	pending("log")
	mustRun(t, "remove", "--socket", sock, hits)
	pending("remove")

	select {
	case err := <-stuckDone:
		if err == nil || !strings.Contains(stuckOut.String(), "did not answer within") {
			t.Errorf("the stuck insert: %v\n%s", err, stuckOut.String())
		}
	case <-time.After(stubTimeout + time.Minute):
		t.Fatal("the insert into the stub that never answers did not end")
	}
	if n := accepts.Load(); n != 1 {
		t.Errorf("%d connections to the stub, want 1", n)
	}
	// the process ran on correctly throughout
	if got, want := roundLine(t, lines), roundLine(t, refLines); got != want {
		t.Fatalf("after: %s, want %s", got, want)
	}
}

// A 600 MB /v1/remove body is refused without the daemon holding it
// (peak RSS, VmHWM, stays far below it), the error does not echo it, and
// the daemon goes on serving.
func TestDaemonOversizedRequest(t *testing.T) {
	sock, d := startDaemonWith(t)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", sock)
	}}}
	const size = 600 << 20
	for _, path := range []string{"/v1/remove", "/v1/insert"} {
		body := io.MultiReader(strings.NewReader(`{"module":"`), io.LimitReader(repeatA{}, size))
		req, _ := http.NewRequest("POST", "http://gprobes"+path, body) // chunked: no length
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if resp.StatusCode/100 != 4 || len(b) > 1024 || bytes.Contains(b, []byte("aaaaaaaa")) {
			t.Errorf("%s: %d, %d bytes: %.300s", path, resp.StatusCode, len(b), b)
		}
	}
	if hwm := vmHWM(t, d.Process.Pid); hwm > 200<<20 {
		t.Errorf("the daemon's peak RSS is %d MiB after refusing %d MiB bodies", hwm>>20, size>>20)
	} else {
		t.Logf("the daemon's peak RSS: %d MiB", hwm>>20)
	}
	mustRun(t, "query", "--socket", sock, "--all")
}

type repeatA struct{}

func (repeatA) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}

// vmHWM is a process's peak resident set, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// gprobes daemon --socket PATH with a regular file, a directory or a
// symbolic link at PATH: a clear error, and PATH left as it was.
func TestDaemonSocketNotASocket(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "notes.txt")
	os.WriteFile(file, []byte("precious"), 0o644)
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o755)
	link := filepath.Join(dir, "link")
	os.Symlink(file, link)
	exe, _ := os.Executable()
	for _, p := range []string{file, sub, link} {
		// a subprocess: a daemon that took the path would serve on
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		d := exec.CommandContext(ctx, exe, "daemon", "--socket", p, "--state", filepath.Join(dir, "state"))
		d.Env = append(os.Environ(), "GPROBES_TEST_MAIN=1")
		out, err := d.CombinedOutput()
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut {
			t.Errorf("daemon --socket %s: still running after a minute (it took the path)", p)
		} else if err == nil || !strings.Contains(string(out), "not a socket") || !strings.Contains(string(out), p) {
			t.Errorf("daemon --socket %s: %v, %s", p, err, out)
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "precious" {
		t.Errorf("the file: %q %v", b, err)
	}
	if fi, err := os.Lstat(sub); err != nil || !fi.IsDir() {
		t.Errorf("the directory: %v", err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link: %v", err)
	}
}
