package otlp

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gprobes/gprobes/daemon"
	"github.com/gprobes/gprobes/internal/otlptest"
	"github.com/gprobes/gprobes/probe"
)

// TestMain: this test binary is also the forwarder the tests' exporters
// start (Options.Forwarder), when GPROBES_OTLP_TEST_FORWARDER is set.
func TestMain(m *testing.M) {
	if os.Getenv("GPROBES_OTLP_TEST_FORWARDER") == "1" {
		if err := Forward(os.Args[len(os.Args)-1]); err != nil {
			fmt.Fprintln(os.Stderr, "otlp-forward:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Setenv("GPROBES_OTLP_TEST_FORWARDER", "1")
	os.Exit(m.Run())
}

// newExp is New with this test binary as the forwarder.
func newExp(t testing.TB, o Options) *Exporter {
	t.Helper()
	o.Forwarder = []string{os.Args[0]}
	e, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// warnings collects what an exporter says.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) add(s string) { w.mu.Lock(); w.msgs = append(w.msgs, s); w.mu.Unlock() }
func (w *warnings) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.msgs, "\n")
}

func lines(n int) []daemon.LogLine {
	t0 := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	out := make([]daemon.LogLine, n)
	for i := range out {
		out[i] = daemon.LogLine{Time: t0.Add(time.Duration(i) * time.Millisecond), Kind: "log", Target: "pid:42", Module: "/bin/work",
			Major: 1, Minor: uint16(i%2 + 1), Location: "work", Address: "0x401000", Pid: 42, Tid: 43 + i, CPU: 1, Exit: 1,
			Data: fmt.Sprintf("%02x00000000000000", i)}
	}
	return out
}

// export hands the record to e as the daemon does: with its line.
func export(e *Exporter, l *daemon.LogLine) {
	e.Export(l, l.AppendJSON(nil))
}

func waitFor(t *testing.T, what string, d time.Duration, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}

// Records reach the collector's own receiver, over gRPC and over HTTP,
// with every field of log.jsonl as an attribute, exceptions as WARN.
func TestExportToTheCollector(t *testing.T) {
	rcv, err := otlptest.Start("auto", "auto")
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close()
	for _, url := range []string{"grpc://" + rcv.GRPC, "http://" + rcv.HTTP} {
		t.Run(url[:strings.Index(url, ":")], func(t *testing.T) {
			before := len(rcv.Records())
			var w warnings
			e := newExp(t, Options{URL: url, Interval: 50 * time.Millisecond, Warn: w.add, Version: "test"})
			in := lines(3)
			in[1].Probe, in[1].Kind, in[1].Exit, in[1].Truncated = "retprobe", "trace", 2, true
			in[2].Kind, in[2].Data, in[2].Exception, in[2].PC, in[2].Line = "exception", "", "page-fault", 4, "p.dpdf:7"
			in[0].Stacks = []probe.Stack{{Kind: "user", Frames: []probe.Frame{{Address: 0x401000, Function: "work", Module: "/bin/work"}, {Address: 0x401234, Function: "main", Offset: 0x34, Module: "/bin/work"}}},
				{Kind: "kernel", Frames: []probe.Frame{{Address: 0xffffffff81000010, Function: "do_syscall_64", Offset: 0x10, Module: "vmlinux"}}}}
			for i := range in {
				export(e, &in[i])
			}
			waitFor(t, "3 records", 10*time.Second, func() bool { return len(rcv.Records())-before == 3 })
			if err := e.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := rcv.Records()[before:]
			for i, r := range got {
				l := in[i]
				want := map[string]any{"kind": l.Kind, "target": "pid:42", "module": "/bin/work", "major": int64(1), "minor": int64(l.Minor),
					"location": "work", "address": "0x401000", "pid": int64(42), "tid": int64(l.Tid), "cpu": int64(1), "exit": int64(l.Exit)}
				switch i {
				case 0:
					want["data"] = []byte{0, 0, 0, 0, 0, 0, 0, 0}
					want["ustack"] = "0x401000 work+0x0 (/bin/work)\n0x401234 main+0x34 (/bin/work)"
					want["kstack"] = "0xffffffff81000010 do_syscall_64+0x10 (vmlinux)"
				case 1:
					want["data"], want["probe"], want["truncated"] = []byte{1, 0, 0, 0, 0, 0, 0, 0}, "retprobe", true
				case 2:
					want["exception"], want["pc"], want["line"] = "page-fault", int64(4), "p.dpdf:7"
				}
				if fmt.Sprint(r.Attrs) != fmt.Sprint(want) {
					t.Errorf("record %d attributes:\n got %v\nwant %v", i, r.Attrs, want)
				}
				sev := "INFO"
				if i == 2 {
					sev = "WARN"
				}
				if r.SeverityText != sev || r.Severity.String() != map[string]string{"INFO": "Info", "WARN": "Warn"}[sev] {
					t.Errorf("record %d severity %s %v, want %s", i, r.SeverityText, r.Severity, sev)
				}
				if r.Time != l.Time.UnixNano() || r.Observed == 0 {
					t.Errorf("record %d time %d observed %d, want %d", i, r.Time, r.Observed, l.Time.UnixNano())
				}
				if r.Resource["service.name"] != "gprobes" || r.Resource["service.version"] != "test" || r.Scope != "github.com/gprobes/gprobes" {
					t.Errorf("record %d resource %v scope %q", i, r.Resource, r.Scope)
				}
			}
			bodies := []string{"log /bin/work(1,1) work exit 1", "trace /bin/work(1,2) retprobe work exit 2", "exception /bin/work(1,1) work page-fault at pc 0x4"}
			for i, r := range got {
				if r.Body != bodies[i] {
					t.Errorf("record %d body %q, want %q", i, r.Body, bodies[i])
				}
			}
			st := e.Status()
			if st.Sent != 3 || st.Queued != 0 || st.Dropped.Records != 0 || st.Endpoint != strings.TrimSuffix(url, "/")+map[bool]string{true: "/v1/logs"}[strings.HasPrefix(url, "http")] {
				t.Errorf("status %+v", st)
			}
			if !strings.Contains(w.String(), "3 records sent to") || !strings.Contains(w.String(), "none dropped") {
				t.Errorf("warnings: %s", w.String())
			}
		})
	}
}

// A receiver that is not there yet: the batch is sent again until it is,
// and nothing is lost; over gRPC (UNAVAILABLE) and HTTP (a refused
// connection).
func TestUnreachableIsRetried(t *testing.T) {
	for _, scheme := range []string{"grpc", "http"} {
		t.Run(scheme, func(t *testing.T) {
			addr, err := otlptest.FreeAddr()
			if err != nil {
				t.Fatal(err)
			}
			var w warnings
			e := newExp(t, Options{URL: scheme + "://" + addr, Interval: 50 * time.Millisecond, Retry: 30 * time.Second, Warn: w.add})
			defer e.Shutdown(context.Background())
			in := lines(5)
			for i := range in {
				export(e, &in[i])
			}
			time.Sleep(1500 * time.Millisecond) // a first attempt or two fail
			if st := e.Status(); st.Sent != 0 || st.Queued != 5 {
				t.Fatalf("before the receiver: %+v", st)
			}
			g, h := addr, ""
			if scheme == "http" {
				g, h = "", addr
			}
			rcv, err := otlptest.Start(g, h)
			if err != nil {
				t.Fatal(err)
			}
			defer rcv.Close()
			waitFor(t, "the 5 records retried", 20*time.Second, func() bool { return rcv.Count() == 5 })
			waitFor(t, "sent 5", 5*time.Second, func() bool { return e.Status().Sent == 5 })
			if st := e.Status(); st.Dropped.Records != 0 || st.Queued != 0 {
				t.Errorf("status %+v", st)
			}
		})
	}
}

// A receiver that never comes: once the retries run out the records are
// counted, per probe, and the exporter says so once.
func TestUnreachableIsCounted(t *testing.T) {
	addr, err := otlptest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	var w warnings
	e := newExp(t, Options{URL: "grpc://" + addr, Interval: 50 * time.Millisecond, Retry: time.Second, Warn: w.add})
	in := lines(5)
	for i := range in {
		export(e, &in[i])
	}
	waitFor(t, "5 failed", 20*time.Second, func() bool { return e.Status().Failed == 5 })
	st := e.Status()
	if st.Dropped.Records != 5 || st.QueueFull != 0 || st.Sent != 0 || st.Queued != 0 || st.Dropped.FirstError == "" {
		t.Errorf("status %+v", st)
	}
	if a, b := e.LostOf("pid:42", "/bin/work", 1), e.LostOf("pid:42", "/bin/work", 2); a != 3 || b != 2 {
		t.Errorf("per probe: minor 1 %d, minor 2 %d; want 3 and 2", a, b)
	}
	waitFor(t, "the warning", 3*time.Second, func() bool { return strings.Contains(w.String(), "records are being dropped") })
	e.Shutdown(context.Background())
	if n := strings.Count(w.String(), "being dropped"); n != 1 {
		t.Errorf("said %d times:\n%s", n, w.String())
	}
	if !strings.Contains(w.String(), "5 dropped (0 with the queue full, 5 not accepted; the last: ") {
		t.Errorf("the last word:\n%s", w.String())
	}
}

// A record that comes when the ring is full is dropped at once and
// counted; Export never waits. Shutdown counts what it could not send:
// every record is sent or counted.
func TestQueueFull(t *testing.T) {
	addr, err := otlptest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	e := newExp(t, Options{URL: "grpc://" + addr, Queue: 4096, Interval: 50 * time.Millisecond, Retry: time.Minute})
	in := lines(100)
	// nothing listens at addr and the sender waits a minute between
	// tries: an Export that waited for room would not return
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range in {
			export(e, &in[i])
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("100 exports did not return within a minute (status %+v): Export waits for room", e.Status())
	}
	st := e.Status()
	if st.QueueFull < 50 || st.Dropped.Records != st.QueueFull || !strings.Contains(st.Dropped.LastError, "queue is full") {
		t.Errorf("status %+v", st)
	}
	if a, b := e.LostOf("pid:42", "/bin/work", 1), e.LostOf("pid:42", "/bin/work", 2); a+b != st.QueueFull {
		t.Errorf("per probe %d + %d, in all %d", a, b, st.QueueFull)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	e.Shutdown(ctx)
	if st := e.Status(); st.Sent != 0 || st.Failed+st.QueueFull != 100 || st.Dropped.Records != 100 || st.Queued != 0 {
		t.Errorf("after shutdown: %+v", st)
	}
}

// The forwarder runs SCHED_IDLE, every thread; one that dies is replaced,
// what it had taken and not sent is counted, and the records after it are
// sent by the next.
func TestForwarder(t *testing.T) {
	rcv, err := otlptest.Start("auto", "")
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close()
	var w warnings
	e := newExp(t, Options{URL: "grpc://" + rcv.GRPC, Interval: 50 * time.Millisecond, Warn: w.add})
	defer e.Shutdown(context.Background())
	in := lines(10)
	for i := range in[:5] {
		export(e, &in[i])
	}
	waitFor(t, "5 sent", 10*time.Second, func() bool { return e.Status().Sent == 5 })
	e.childMu.Lock()
	pid := e.child.cmd.Process.Pid
	e.childMu.Unlock()
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	for _, task := range tasks {
		b, _ := os.ReadFile(task)
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		// fields 19 and 41 of stat: nice and the scheduling policy
		if len(f) < 39 || f[16] != "19" || f[38] != "5" {
			t.Errorf("%s: nice %s policy %s, want 19 and 5 (SCHED_IDLE)", task, f[16], f[38])
		}
	}
	if len(tasks) == 0 {
		t.Error("no threads of the forwarder found")
	}
	syscall.Kill(pid, syscall.SIGKILL)
	waitFor(t, "the word of it", 5*time.Second, func() bool { return strings.Contains(w.String(), "the forwarder exited") })
	for i := range in[5:] {
		export(e, &in[5+i])
	}
	waitFor(t, "10 sent", 10*time.Second, func() bool { return e.Status().Sent == 10 })
	if rcv.Count() != 10 || e.Status().Dropped.Records != 0 {
		t.Errorf("received %d, status %+v", rcv.Count(), e.Status())
	}
}

func TestBadURL(t *testing.T) {
	for _, u := range []string{"", "localhost:4317", "ftp://h:1", "grpc://h:1/v1/logs", "grpc://"} {
		if _, err := New(Options{URL: u}); err == nil {
			t.Errorf("%q accepted", u)
		}
	}
}

// The probed thread's share: a copy into the queue, no allocation.
func TestExportDoesNotAllocate(t *testing.T) {
	addr, _ := otlptest.FreeAddr()
	e := newExp(t, Options{URL: "grpc://" + addr, Retry: -1})
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		e.Shutdown(ctx)
	}()
	l := lines(1)[0]
	line := l.AppendJSON(nil)
	if n := testing.AllocsPerRun(1000, func() { e.Export(&l, line) }); n != 0 {
		t.Errorf("Export allocates %v times", n)
	}
}

// BenchmarkExport is what the exporter adds to a hit: the copy of the
// record's line (made for the log) into the ring (the forwarder's work is not measured here;
// scripts/bench-process measures a hit with the forwarder running).
func BenchmarkExport(b *testing.B) {
	mem := make([]byte, dataOff+64<<20)
	r, err := newRing(mem, 64<<20)
	if err != nil {
		b.Fatal(err)
	}
	e := &Exporter{ring: r}
	l := lines(1)[0]
	var tail uint64
	b.ReportAllocs()
	line := l.AppendJSON(nil)
	for b.Loop() {
		e.Export(&l, line)
		if r.load(offHead)-tail > 32<<20 { // a reader that keeps up
			tail = r.load(offHead)
			r.done(tail, 0)
		}
	}
	if n := e.queueFull.Load(); n > 0 {
		b.Fatalf("%d dropped", n)
	}
}
