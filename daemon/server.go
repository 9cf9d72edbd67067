// Package daemon is the probe manager: it holds the inserted modules, one
// engine per target, the global variables and the log, and serves the
// gprobes commands over HTTP with JSON on a Unix socket (docs/api.md).
//
// The trap: Shutdown must run before the process exits (the command wires
// it to SIGTERM and SIGINT): it is what takes every probe out and lets
// every target go on with its original code.
package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/internal/shm"
	"github.com/gprobes/gprobes/ppdf"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/targets"
)

// DefaultSocket is the socket the daemon and the commands use unless told
// otherwise: GPROBES_SOCKET, /run/gprobes/gprobes.sock as root,
// $XDG_RUNTIME_DIR/gprobes.sock otherwise.
func DefaultSocket() string {
	if s := os.Getenv("GPROBES_SOCKET"); s != "" {
		return s
	}
	if os.Geteuid() == 0 {
		return "/run/gprobes/gprobes.sock"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "gprobes.sock")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("gprobes-%d.sock", os.Getuid()))
}

// DefaultState is the daemon's state folder (log and dumps): GPROBES_STATE,
// /var/lib/gprobes as root, $XDG_STATE_HOME/gprobes or
// ~/.local/state/gprobes otherwise.
func DefaultState() string {
	if s := os.Getenv("GPROBES_STATE"); s != "" {
		return s
	}
	if os.Geteuid() == 0 {
		return "/var/lib/gprobes"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "gprobes")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "state", "gprobes")
}

// Server is a running daemon.
type Server struct {
	// Limits bound requests, connections and stub connections; zero
	// fields take the defaults of limits.go. Set before Listen.
	Limits Limits
	// Trust says which packs the daemon inserts (trust.go). Set before
	// Listen.
	Trust Trust

	// mu guards targets and closing only: nothing slow (attaching,
	// connecting to a stub, inserting) is done while holding it. Each
	// target has its own lock for that (target.mu).
	mu      sync.Mutex
	targets map[string]*target
	closing bool           // Shutdown has begun: no new target
	opens   sync.WaitGroup // targets being opened (Shutdown waits for them)
	sockID  *fileID        // the socket we created, to remove only that one
	gv      []uint64
	gvMem   *shm.Mem
	// lostClosed: records the jump pads of targets closed since dropped
	lostClosed atomic.Uint64
	gvLock     sync.Mutex
	log        *LogWriter
	state      string
	socket     string
	ln         net.Listener
	http       *http.Server
	started    time.Time
	ext        extensions // exporters and metrics (export.go)
}

// target is one target of the daemon. While it is being opened (ptrace
// attach, exec, connection to a GDB stub, Xen) it is in Server.targets
// under its spec with eng nil and mu held by the opener: another insert
// into the same target waits for that open alone, and every other request
// skips it. mu serializes what changes a target (open, insert, remove,
// close); reads (query, getvars, status) need only the engine, which
// serializes them on its loop.
type target struct {
	mu   sync.Mutex
	name string // key in Server.targets
	eng  probe.Prober
	pid  int
	exec bool
	// under mu:
	openErr error // the open failed (waiters return it)
	closed  bool  // closed and out of Server.targets: open a new one
}

// ready says whether the target's engine runs (under Server.mu: eng is
// set under it once the open succeeded).
func (t *target) ready() bool { return t.eng != nil }

// New opens the state folder and the log (rotated as logOpts say; by
// default at DefaultLogMaxSize, keeping DefaultLogKeep files).
func New(socket, state string, logOpts ...LogOptions) (*Server, error) {
	lw, err := OpenLog(state, logOpts...)
	if err != nil {
		return nil, err
	}
	s := &Server{targets: map[string]*target{}, log: lw, state: state, socket: socket, started: time.Now()}
	lw.TargetLost = s.targetLost
	// the global variables in shared memory: jump pads in the processes
	// probed map the same words (engine.Options.GVMem)
	if m, err := shm.Create("gprobes-gv", rpn.MaxGVars*8); err == nil {
		s.gvMem = m
		s.gv = m.Words(0, rpn.MaxGVars)
	} else {
		s.gv = make([]uint64, rpn.MaxGVars)
	}
	return s, nil
}

// Listen creates the socket, mode 0600. A stale socket left by a daemon
// that died is replaced; a live one is an error, and so is anything at the
// path that is not a socket (a file, a directory, a symbolic link), which
// is left as it is (clearStaleSocket).
func (s *Server) Listen() error {
	if ln, err := s.activated(); ln != nil || err != nil {
		return err // systemd's socket (activation.go)
	}
	if err := os.MkdirAll(filepath.Dir(s.socket), 0o700); err != nil {
		return err
	}
	if err := clearStaleSocket(s.socket); err != nil {
		return err
	}
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", s.socket)
	syscall.Umask(old)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.socket, err)
	}
	// Closing the listener must not unlink the path blindly: by then it
	// may be another daemon's socket. Shutdown removes it if it is ours.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	id, err := lstatID(s.socket)
	if err != nil {
		ln.Close()
		return fmt.Errorf("listen on %s: %w", s.socket, err)
	}
	os.Chmod(s.socket, 0o600)
	s.sockID = id
	cl := newConnLimiter(ln, s.Limits.maxConns())
	s.ln = cl
	s.http = s.Limits.httpServer(s.handler(), cl)
	return nil
}

// Serve answers requests until Shutdown.
func (s *Server) Serve() error {
	err := s.http.Serve(s.ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// handler routes the API.
func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	// Every request body is bounded by what the endpoint carries (limits.go).
	mux.HandleFunc("GET /v1/status", s.bounded(noBody, s.handleStatus))
	mux.HandleFunc("POST /v1/insert", s.bounded(s.Limits.maxInsertBody(), s.handleInsert))
	mux.HandleFunc("POST /v1/remove", s.bounded(maxRemoveBody, s.handleRemove))
	mux.HandleFunc("GET /v1/vars", s.bounded(noBody, s.handleVars))
	mux.HandleFunc("POST /v1/vars/reset", s.bounded(noBody, s.handleVars))
	mux.HandleFunc("GET /v1/probes", s.bounded(noBody, s.handleProbes))
	mux.HandleFunc("GET /v1/log", s.streaming(s.handleLog))
	s.routeSwitch(mux) // POST /v1/enable, /v1/disable (switch.go)
	s.routeMetrics(mux)
	return mux
}

// Shutdown takes every probe out, lets every target go, closes the socket
// and the log.
//
// A target still being opened is waited for (its open is bounded: a GDB
// stub by Limits.StubTimeout) and then closed like the others; no new
// target is opened once Shutdown has begun. Calls after the first do
// nothing.
func (s *Server) Shutdown() error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil // done, or under way
	}
	s.closing = true
	s.mu.Unlock()
	s.opens.Wait() // an open under way ends, and sees closing: it lets its target go
	s.mu.Lock()
	all := make([]*target, 0, len(s.targets))
	for _, t := range s.targets {
		all = append(all, t)
	}
	s.mu.Unlock()
	var errs []error
	for _, t := range all {
		t.mu.Lock()
		if !t.closed && t.eng != nil {
			if _, err := t.eng.Close(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", t.name, err))
			}
			t.closed = true
		}
		t.mu.Unlock()
	}
	s.mu.Lock()
	s.targets = map[string]*target{}
	s.mu.Unlock()
	if s.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s.http.Shutdown(ctx)
		cancel()
		s.http.Close() // what is left: log followers, stalled clients
	}
	if s.sockID != nil {
		removeSocketIfOurs(s.socket, s.sockID)
	}
	if err := s.closeExtensions(); err != nil {
		errs = append(errs, err)
	}
	s.log.Close()
	return errors.Join(errs...)
}

// InsertRequest is the body of POST /v1/insert.
type InsertRequest struct {
	Target string `json:"target"` // pid:N, exec:PATH ARGS..., gdb:HOST:PORT, kernel, host; "": host
	Mode   string `json:"mode"`   // "", "merge" or "replace"
	PPDF   []byte `json:"ppdf"`   // the module, PPDF-encoded (base64 in JSON): a pack of one build or several
	// Signature is the pack's SSHSIG signature, armored (the PPDF's .sig
	// file), when it has one.
	Signature string `json:"signature,omitempty"`
	// Symbols are files on the daemon's machine for a guest kernel
	// (System.map, kallsyms copy, vmlinux with BTF or DWARF).
	Symbols []string `json:"symbols,omitempty"`
	// KASLROffset is the guest kernel's KASLR slide, when known.
	KASLROffset *int64 `json:"kaslr_offset,omitempty"`
	// Dir is the client's working directory (absolute): an exec:
	// target's program given by a relative path (exec:./prog) is found
	// there, and runs there. Empty: the daemon's.
	Dir string `json:"dir,omitempty"`
	// EveryCopy places the pack's probes on every file of its build
	// that processes map, not only the file its name names (the host
	// target: docs/global.md).
	EveryCopy bool `json:"every_copy,omitempty"`
}

// TargetProbe is a probe with its target, as the API reports it.
type TargetProbe struct {
	Target string `json:"target"`
	probe.Info
	// Lost is how many of the probe's records are not in the log (the
	// file did not take them: a full disk...), SyslogLost how many syslog
	// missed (docs/api.md).
	Lost       uint64 `json:"lost"`
	SyslogLost uint64 `json:"syslog_lost"`
}

// InsertResponse is the answer of POST /v1/insert.
type InsertResponse struct {
	Target string        `json:"target"`
	Probes []TargetProbe `json:"probes"`
	// Kernel says what a guest kernel target is and where its symbols
	// and types came from (the guest's memory, a cache, --symbols)
	Kernel string `json:"kernel,omitempty"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

func (s *Server) handleInsert(w http.ResponseWriter, r *http.Request) {
	req, code, err := s.decodeInsert(w, r)
	if err != nil {
		writeErr(w, code, err)
		return
	}
	// the signature first: nothing of a stranger's pack is decoded, and
	// no target opened, before it is verified
	if _, code, err := s.Trust.verify(req.PPDF, req.Signature); err != nil {
		writeErr(w, code, err)
		return
	}
	builds, err := ppdf.DecodePack(req.PPDF)
	req.PPDF = nil // the module is decoded: let the GC have the bytes
	if err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("insert: %w", err))
		return
	}
	if err := s.Trust.readOnly(builds); err != nil {
		writeErr(w, http.StatusForbidden, err)
		return
	}
	mode := probe.InsertNew
	switch req.Mode {
	case "merge":
		mode = probe.InsertMerge
	case "replace":
		mode = probe.InsertReplace
	case "":
	default:
		writeErr(w, http.StatusBadRequest, fmt.Errorf("insert: mode %q: merge or replace", req.Mode))
		return
	}
	resp, code, err := s.InsertPack(req.Target, builds, mode, TargetOptions{Symbols: req.Symbols, KASLROffset: req.KASLROffset, Dir: req.Dir, EveryCopy: req.EveryCopy})
	if err != nil {
		writeErr(w, code, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// Insert inserts a module into a target, attaching to or starting it if
// needed. A module name inserted into another target is refused: names are
// how the other commands find modules.
// TargetOptions are what a target may need beyond its name.
type TargetOptions struct {
	Symbols     []string
	KASLROffset *int64
	Dir         string // an exec: target's directory (InsertRequest.Dir)
	EveryCopy   bool   // InsertRequest.EveryCopy
}

func (s *Server) Insert(spec string, m *rpn.Module, mode probe.InsertMode, topts TargetOptions) (*InsertResponse, int, error) {
	return s.InsertPack(spec, []*rpn.Module{m}, mode, topts)
}

// InsertPack is Insert of the builds of a pack: the target takes the one
// of the build it runs (probe.InsertPack).
func (s *Server) InsertPack(spec string, builds []*rpn.Module, mode probe.InsertMode, topts TargetOptions) (*InsertResponse, int, error) {
	m := builds[0]
	if spec == "" {
		// no target named: this machine as a whole (docs/global.md)
		spec = targets.Default
	}
	t, code, err := s.target(spec, topts)
	if err != nil {
		return nil, code, err
	}
	// t.mu is held: this target is ours until the insert is done; the
	// daemon's other targets and requests go on meanwhile.
	defer t.mu.Unlock()
	// A module name is unique within a target; the same module may be in
	// several targets (one probe file for several guests or processes).
	if mode == probe.InsertNew && contains(t.eng.Modules(), m.Name) {
		return nil, http.StatusConflict, fmt.Errorf("insert %s: %w in %s: use --merge to add these probes to it, or --replace to replace it", m.Name, probe.ErrModuleIn, t.name)
	}
	var probes []probe.Info
	if topts.EveryCopy {
		ci, ok := t.eng.(probe.CopyInserter)
		if !ok {
			err = fmt.Errorf("insert %s: --every-copy: only the host target places a pack on every copy of its build, not %s", m.Name, t.name)
		} else {
			probes, err = ci.InsertPackCopies(builds, mode)
		}
	} else {
		probes, err = probe.InsertPack(t.eng, builds, mode)
	}
	if err != nil {
		code := http.StatusBadRequest
		if errors.Is(err, probe.ErrModuleIn) {
			code = http.StatusConflict
		}
		if len(t.eng.Modules()) == 0 {
			s.closeTarget(t)
		}
		return nil, code, err
	}
	if err := t.eng.Release(); err != nil {
		return nil, http.StatusInternalServerError, err
	}
	resp := &InsertResponse{Target: t.name}
	if d, ok := t.eng.(interface{ Describe() string }); ok {
		resp.Kernel = d.Describe()
	}
	for _, p := range probes {
		resp.Probes = append(resp.Probes, TargetProbe{Target: t.name, Info: p})
	}
	return resp, http.StatusOK, nil
}

// target finds or opens the engine of a target spec and returns it with
// its lock held. Opening (attach, exec, stub connection and handshake, Xen)
// runs without Server.mu: while a target is opened only the inserts into
// that same target wait, for that open, and get its error if it fails.
func (s *Server) target(spec string, topts TargetOptions) (*target, int, error) {
	open, sp, err := s.opener(spec, topts)
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	exec, key := sp.Kind == targets.Exec, sp.String()
	for {
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			return nil, http.StatusServiceUnavailable, errShuttingDown
		}
		t := s.targets[key]
		if exec || t == nil {
			return s.openTarget(spec, key, exec, sp.NamedBySpec(), open) // unlocks s.mu
		}
		s.mu.Unlock()
		t.mu.Lock() // waits for whoever opens or changes this target
		switch {
		case t.openErr != nil:
			err := t.openErr
			t.mu.Unlock()
			return nil, http.StatusBadRequest, err
		case t.closed:
			t.mu.Unlock()
			continue // removed meanwhile: open it again
		case t.eng.EndReason() != "":
			// the process ended or the stub went away: a new one may be
			// behind the same name (a guest rebooted, a stub restarted)
			s.closeTarget(t)
			t.mu.Unlock()
			continue
		}
		if sa, ok := t.eng.(probe.SymbolAdder); ok && len(topts.Symbols) > 0 {
			if err := sa.AddSymbols(topts.Symbols); err != nil {
				t.mu.Unlock()
				return nil, http.StatusBadRequest, err
			}
		}
		return t, http.StatusOK, nil
	}
}

var errShuttingDown = errors.New("the gprobes daemon is shutting down")

// openTarget opens a new target, called with s.mu held, which it releases
// at once. Unless exec (each exec starts a new process) the target is in
// s.targets under key while it opens, with its lock held.
func (s *Server) openTarget(spec, key string, exec, named bool, start func(engine.Options) (probe.Prober, error)) (*target, int, error) {
	t := &target{name: key, exec: exec}
	t.mu.Lock()
	if !exec {
		s.targets[key] = t
	}
	s.opens.Add(1)
	defer s.opens.Done()
	s.mu.Unlock()
	eng, err := start(engine.Options{
		Sink:     &targetSink{s: s, t: t},
		DumpDir:  filepath.Join(s.state, "dumps"),
		GV:       s.gv,
		GVMem:    s.gvMem,
		GVLock:   &s.gvLock,
		Route:    s.Limits.Route,
		RingSize: s.Limits.RingSize,
	})
	s.mu.Lock()
	if err != nil {
		if s.targets[key] == t {
			delete(s.targets, key)
		}
		s.mu.Unlock()
		t.openErr = s.openError(spec, err)
		t.closed = true
		t.mu.Unlock()
		return nil, http.StatusBadRequest, t.openErr
	}
	if s.closing {
		// Shutdown began while this one opened: let it go at once
		if s.targets[key] == t {
			delete(s.targets, key)
		}
		s.mu.Unlock()
		eng.Close()
		t.closed = true
		t.openErr = errShuttingDown
		t.mu.Unlock()
		return nil, http.StatusServiceUnavailable, errShuttingDown
	}
	name := fmt.Sprintf("pid:%d", eng.Pid()) // a process is named by its pid, a guest or the kernel by its spec
	if named {
		name = key
	}
	if s.targets[key] == t {
		delete(s.targets, key)
	}
	t.pid = eng.Pid()
	t.name = name
	t.eng = eng
	s.targets[name] = t
	s.mu.Unlock()
	return t, http.StatusOK, nil
}

// closeTarget lets a target go and takes it out of s.targets; t.mu held.
func (s *Server) closeTarget(t *target) {
	if t.closed {
		return
	}
	if _, err := t.eng.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "gprobes daemon: detach %s: %v\n", t.name, err)
	}
	s.forgetTarget(t)
}

// forgetTarget takes a closed target out of s.targets; t.mu held.
func (s *Server) forgetTarget(t *target) {
	s.lostClosed.Add(t.eng.Lost())
	t.closed = true
	s.mu.Lock()
	if s.targets[t.name] == t {
		delete(s.targets, t.name)
	}
	s.mu.Unlock()
}

// opener checks a target spec (package targets) and returns what starts
// it and the spec (whose canonical name is the key it is known by while
// it opens).
func (s *Server) opener(spec string, topts TargetOptions) (func(engine.Options) (probe.Prober, error), targets.Spec, error) {
	sp, err := targets.Parse(spec)
	if err != nil {
		return nil, sp, err
	}
	to := targets.Options{Symbols: topts.Symbols, KASLROffset: topts.KASLROffset, StubTimeout: s.Limits.stubTimeout(), Dir: topts.Dir}
	if !sp.Local() {
		// what can be checked before anything is touched (an exec
		// program found in PATH) is checked now
		open, err := sp.Open(to)
		if err != nil {
			return nil, sp, err
		}
		return func(eo engine.Options) (probe.Prober, error) { return engine.Start(open, eo) }, sp, nil
	}
	return func(eo engine.Options) (probe.Prober, error) {
		eo.RingSize = s.Limits.KernelRingSize
		return sp.Start(to, eo)
	}, sp, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// RemoveRequest is the body of POST /v1/remove.
type RemoveRequest struct {
	Module string   `json:"module"`
	Minors []uint16 `json:"minors,omitempty"`
	All    bool     `json:"all,omitempty"`
	// Target, when set, limits the removal to that target (as inserted:
	// pid:N, gdb:HOST:PORT); otherwise the module goes from every target.
	Target string `json:"target,omitempty"`
}

func (s *Server) handleRemove(w http.ResponseWriter, r *http.Request) {
	var req RemoveRequest
	if code, err := decodeBody(w, r, "remove", &req); err != nil {
		writeErr(w, code, err)
		return
	}
	n, err := s.Remove(req)
	if err != nil {
		writeErr(w, http.StatusNotFound, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"removed": n})
}

// Remove takes probes out: every module with --all, else the module's
// probes (those with the given minors, or all of them).
//
// Targets still being opened have no probes yet and are skipped; each
// target is changed under its own lock, so a target busy with an insert
// holds up only the removal from that target.
func (s *Server) Remove(req RemoveRequest) (int, error) {
	n := 0
	found := false
	targets := s.readyTargets()
	if req.Target != "" && !slices.ContainsFunc(targets, func(t *target) bool { return t.name == req.Target }) {
		return 0, fmt.Errorf("remove: no target %s has probes", short(req.Target))
	}
	for _, t := range targets {
		if req.Target != "" && t.name != req.Target {
			continue
		}
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			continue
		}
		// one command to the target: the removes, and the close when
		// nothing is left in it (a target stopped only by a hit or a
		// pause, gdbsx, needs one stop for it all)
		k, f, closed, err := probe.RemoveClose(t.eng, func(mod string) bool { return req.All || mod == req.Module }, req.Minors)
		n += k
		found = found || f
		if closed {
			if err != nil {
				fmt.Fprintf(os.Stderr, "gprobes daemon: detach %s: %v\n", t.name, err)
			}
			s.forgetTarget(t) // nothing left in it: let it go
		}
		t.mu.Unlock()
	}
	if !found && !req.All {
		if req.Target != "" {
			return 0, fmt.Errorf("remove: no module %s is inserted in %s", short(req.Module), short(req.Target))
		}
		return 0, fmt.Errorf("remove: no module %s is inserted", short(req.Module))
	}
	return n, nil
}

// readyTargets returns the targets whose engine runs (not those still
// being opened), sorted by name. Server.mu is held only to copy the map.
func (s *Server) readyTargets() []*target {
	s.mu.Lock()
	out := make([]*target, 0, len(s.targets))
	for _, t := range s.targets {
		if t.ready() {
			out = append(out, t)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b *target) int { return strings.Compare(a.name, b.name) })
	return out
}

// VarsModule is one module's local variables.
type VarsModule struct {
	Target string   `json:"target"`
	Module string   `json:"module"`
	LV     []string `json:"lv"`
}

// VarsResponse is the answer of /v1/vars.
type VarsResponse struct {
	Modules []VarsModule `json:"modules"`
	GV      []string     `json:"gv"`
	// KernelGV are the kernel target's global variables: its eBPF
	// programs cannot reach the words the daemon's other targets share
	// (docs/kernel.md)
	KernelGV []string `json:"kernel_gv,omitempty"`
}

// ownGV is a target whose global variables are its own (the kernel's).
type ownGV interface{ GV(n int) []uint64 }

func (s *Server) handleVars(w http.ResponseWriter, r *http.Request) {
	module := r.URL.Query().Get("module")
	reset := strings.HasSuffix(r.URL.Path, "/reset")
	resp, err := s.Vars(module, reset)
	if err != nil {
		writeErr(w, http.StatusNotFound, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// Vars returns the variables of one module ("" for all) and the global
// ones, resetting them when asked.
func (s *Server) Vars(module string, reset bool) (*VarsResponse, error) {
	resp := &VarsResponse{Modules: []VarsModule{}}
	// the global variables as each engine read them before its reset: a
	// word from the first module that has it (a later module's read
	// comes after an earlier one's reset)
	var gvs []uint64
	for _, t := range s.readyTargets() {
		name := t.name
		_, own := t.eng.(ownGV)
		for _, mod := range t.eng.Modules() {
			if module != "" && mod != module {
				continue
			}
			lv, gv, err := t.eng.Vars(mod, reset)
			if err != nil {
				continue
			}
			if own {
				if len(gv) >= len(resp.KernelGV) {
					resp.KernelGV = decimal(gv)
				}
			} else if len(gv) > len(gvs) {
				gvs = append(gvs, gv[len(gvs):]...)
			}
			resp.Modules = append(resp.Modules, VarsModule{Target: name, Module: mod, LV: decimal(lv)})
		}
	}
	if module != "" && len(resp.Modules) == 0 {
		return nil, fmt.Errorf("getvars: no module %s is inserted", short(module))
	}
	resp.GV = decimal(gvs)
	return resp, nil
}

func decimal(v []uint64) []string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = strconv.FormatUint(x, 10)
	}
	return out
}

func (s *Server) handleProbes(w http.ResponseWriter, r *http.Request) {
	module := r.URL.Query().Get("module")
	probes := s.ProbesBy(module, r.URL.Query().Get("processes") != "")
	if module != "" && len(probes) == 0 {
		writeErr(w, http.StatusNotFound, fmt.Errorf("query: no module %s is inserted", short(module)))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"probes": probes})
}

// Probes lists the probes of one module ("" for all).
func (s *Server) Probes(module string) []TargetProbe { return s.ProbesBy(module, false) }

// ProbesBy is Probes, with each probe's hits by process when processes is
// set and its target counts them (probe.ProcessQuerier: the host target).
func (s *Server) ProbesBy(module string, processes bool) []TargetProbe {
	out := []TargetProbe{}
	for _, t := range s.readyTargets() {
		name := t.name
		query := t.eng.Query
		if pq, ok := t.eng.(probe.ProcessQuerier); ok && processes {
			query = pq.QueryProcesses
		}
		for _, p := range query() {
			if module == "" || p.Module == module {
				lost, slost := s.log.Lost(name, p.Module, p.Minor)
				out = append(out, TargetProbe{Target: name, Info: p, Lost: lost + p.Lost, SyslogLost: slost})
			}
		}
	}
	return out
}

func (s *Server) handleLog(w http.ResponseWriter, r *http.Request) {
	follow := r.URL.Query().Get("follow") != ""
	w.Header().Set("Content-Type", "application/x-ndjson")
	fl, _ := w.(http.Flusher)
	flush := func() {
		if fl != nil {
			fl.Flush()
		}
	}
	s.log.Follow(r.Context(), w, follow, flush)
}

// StatusResponse is the answer of /v1/status.
type StatusResponse struct {
	Pid     int               `json:"pid"`
	Socket  string            `json:"socket"`
	State   string            `json:"state"`
	Log     string            `json:"log"`
	Since   time.Time         `json:"since"`
	Targets map[string]string `json:"targets"` // target -> "running" or why it is gone
	// LogStatus: records lost on the way to the log file and to syslog,
	// and the log's rotation
	LogStatus
	// LostInTargets: records the targets dropped (jump pads' full rings)
	LostInTargets uint64 `json:"lost_in_targets"`
	// Exporters: what each exporter (--otlp) sent and dropped
	Exporters map[string]ExportStatus `json:"exporters,omitempty"`
	// Metrics: the address of the Prometheus metrics listener (--metrics)
	Metrics string `json:"metrics,omitempty"`
	// KernelAbilities: what this host allows the daemon's kernel target
	// (gprobes doctor's matrix, as the daemon found it when the target
	// opened); absent until a kernel insert opened it
	KernelAbilities []bpf.Ability `json:"kernel_abilities,omitempty"`
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Status())
}

// targetLost counts the records the targets dropped (their jump pads'
// full rings), those of targets closed since included: log's lost line.
func (s *Server) targetLost() uint64 {
	n := s.lostClosed.Load()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.targets {
		if t.eng != nil {
			n += t.eng.Lost()
		}
	}
	return n
}
