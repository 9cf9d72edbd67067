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
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/gdbtarget"
	"github.com/gprobes/gprobes/linuxkernel"
	"github.com/gprobes/gprobes/ppdf"
	"github.com/gprobes/gprobes/ptrace"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/xen"
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
	mu      sync.Mutex
	targets map[string]*target
	gv      []uint64
	gvLock  sync.Mutex
	log     *LogWriter
	state   string
	socket  string
	ln      net.Listener
	http    *http.Server
	started time.Time
}

type target struct {
	name string
	eng  *engine.Engine
	pid  int
	exec bool
}

// New opens the state folder and the log (rotated as logOpts say; by
// default at DefaultLogMaxSize, keeping DefaultLogKeep files).
func New(socket, state string, logOpts ...LogOptions) (*Server, error) {
	lw, err := OpenLog(state, logOpts...)
	if err != nil {
		return nil, err
	}
	return &Server{targets: map[string]*target{}, gv: make([]uint64, rpn.MaxGVars), log: lw, state: state,
		socket: socket, started: time.Now()}, nil
}

// Listen creates the socket, mode 0600. A stale socket left by a daemon
// that died is replaced; a live one is an error.
func (s *Server) Listen() error {
	if err := os.MkdirAll(filepath.Dir(s.socket), 0o700); err != nil {
		return err
	}
	if c, err := net.Dial("unix", s.socket); err == nil {
		c.Close()
		return fmt.Errorf("a gprobes daemon is already serving %s", s.socket)
	}
	os.Remove(s.socket)
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", s.socket)
	syscall.Umask(old)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.socket, err)
	}
	os.Chmod(s.socket, 0o600)
	s.ln = ln
	return nil
}

// Serve answers requests until Shutdown.
func (s *Server) Serve() error {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", s.handleStatus)
	mux.HandleFunc("POST /v1/insert", s.handleInsert)
	mux.HandleFunc("POST /v1/remove", s.handleRemove)
	mux.HandleFunc("GET /v1/vars", s.handleVars)
	mux.HandleFunc("POST /v1/vars/reset", s.handleVars)
	mux.HandleFunc("GET /v1/probes", s.handleProbes)
	mux.HandleFunc("GET /v1/log", s.handleLog)
	s.http = &http.Server{Handler: mux}
	err := s.http.Serve(s.ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown takes every probe out, lets every target go, closes the socket
// and the log.
func (s *Server) Shutdown() error {
	s.mu.Lock()
	var errs []error
	for _, t := range s.targets {
		if err := t.eng.Close(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", t.name, err))
		}
	}
	s.targets = map[string]*target{}
	s.mu.Unlock()
	if s.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s.http.Shutdown(ctx)
		cancel()
	}
	os.Remove(s.socket)
	s.log.Close()
	return errors.Join(errs...)
}

// InsertRequest is the body of POST /v1/insert.
type InsertRequest struct {
	Target string `json:"target"` // pid:N, exec:PATH ARGS..., gdb:HOST:PORT
	Mode   string `json:"mode"`   // "", "merge" or "replace"
	PPDF   []byte `json:"ppdf"`   // the module, PPDF-encoded (base64 in JSON)
	// Symbols are files on the daemon's machine for a guest kernel
	// (System.map, kallsyms copy, vmlinux with BTF or DWARF).
	Symbols []string `json:"symbols,omitempty"`
	// KASLROffset is the guest kernel's KASLR slide, when known.
	KASLROffset *int64 `json:"kaslr_offset,omitempty"`
}

// TargetProbe is a probe with its target, as the API reports it.
type TargetProbe struct {
	Target string `json:"target"`
	engine.ProbeInfo
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
	var req InsertRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<30)).Decode(&req); err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("insert: bad request: %w", err))
		return
	}
	m, err := ppdf.Decode(req.PPDF)
	if err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("insert: %w", err))
		return
	}
	mode := engine.InsertNew
	switch req.Mode {
	case "merge":
		mode = engine.InsertMerge
	case "replace":
		mode = engine.InsertReplace
	case "":
	default:
		writeErr(w, http.StatusBadRequest, fmt.Errorf("insert: mode %q: merge or replace", req.Mode))
		return
	}
	resp, code, err := s.Insert(req.Target, m, mode, TargetOptions{Symbols: req.Symbols, KASLROffset: req.KASLROffset})
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
}

func (s *Server) Insert(spec string, m *rpn.Module, mode engine.InsertMode, topts TargetOptions) (*InsertResponse, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A module name is unique within a target; the same module may be in
	// several targets (one probe file for several guests or processes).
	if t := s.targets[spec]; t != nil && t.eng.Gone() == "" && contains(t.eng.Modules(), m.Name) && mode == engine.InsertNew {
		return nil, http.StatusConflict, fmt.Errorf("insert %s: %w in %s: use --merge to add these probes to it, or --replace to replace it", m.Name, engine.ErrModuleIn, t.name)
	}
	t, err := s.target(spec, topts)
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	probes, err := t.eng.Insert(m, mode)
	if err != nil {
		code := http.StatusBadRequest
		if errors.Is(err, engine.ErrModuleIn) {
			code = http.StatusConflict
		}
		if len(t.eng.Modules()) == 0 {
			t.eng.Close()
			delete(s.targets, t.name)
		}
		return nil, code, err
	}
	if err := t.eng.Go(); err != nil {
		return nil, http.StatusInternalServerError, err
	}
	resp := &InsertResponse{Target: t.name}
	for _, p := range probes {
		resp.Probes = append(resp.Probes, TargetProbe{Target: t.name, ProbeInfo: p})
	}
	return resp, http.StatusOK, nil
}

// target finds or opens the engine of a target spec.
func (s *Server) target(spec string, topts TargetOptions) (*target, error) {
	if t, ok := s.targets[spec]; ok && t.eng.Gone() == "" {
		if len(topts.Symbols) > 0 {
			err := t.eng.WithTarget(func(tg engine.Target) error {
				if g, ok := tg.(interface{ AddSymbols([]string) error }); ok {
					return g.AddSymbols(topts.Symbols)
				}
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
		return t, nil
	}
	var open func() (engine.Target, error)
	var exec bool
	switch {
	case strings.HasPrefix(spec, "pid:"):
		pid, err := strconv.Atoi(strings.TrimPrefix(spec, "pid:"))
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("target %q: pid:N with N a process id", spec)
		}
		open = ptrace.Attach(pid)
	case strings.HasPrefix(spec, "exec:"):
		argv := strings.Fields(strings.TrimPrefix(spec, "exec:"))
		if len(argv) == 0 {
			return nil, fmt.Errorf("target %q: exec:PATH [ARGS...]", spec)
		}
		path, err := lookPath(argv[0])
		if err != nil {
			return nil, fmt.Errorf("target %q: %w", spec, err)
		}
		open = ptrace.Exec(path, argv, os.Environ(), "")
		exec = true
	case strings.HasPrefix(spec, "gdb:"):
		addr := strings.TrimPrefix(spec, "gdb:")
		if addr == "" {
			return nil, fmt.Errorf("target %q: gdb:HOST:PORT", spec)
		}
		open = gdbtarget.Open(addr, gdbtarget.Options{Options: linuxkernel.Options{Symbols: topts.Symbols, KASLROffset: topts.KASLROffset}})
	case strings.HasPrefix(spec, "xen:"):
		dom, err := strconv.Atoi(strings.TrimPrefix(spec, "xen:"))
		if err != nil || dom <= 0 || dom >= 0x7ff0 {
			return nil, fmt.Errorf("target %q: xen:DOMID with DOMID a guest domain's id (xl list)", spec)
		}
		open = xen.Open(dom, xen.Options{Options: linuxkernel.Options{Symbols: topts.Symbols, KASLROffset: topts.KASLROffset}})
	default:
		return nil, fmt.Errorf("target %q: want pid:N, exec:PATH [ARGS...], gdb:HOST:PORT or xen:DOMID", spec)
	}
	t := &target{exec: exec}
	eng, err := engine.Start(open, engine.Options{
		Sink:    engine.SinkFunc(func(r *engine.Record) { s.log.Write(ptrLine(FromRecord(t.name, r))) }),
		DumpDir: filepath.Join(s.state, "dumps"),
		GV:      s.gv,
		GVLock:  &s.gvLock,
	})
	if err != nil {
		return nil, err
	}
	t.eng = eng
	t.pid = eng.Pid()
	t.name = fmt.Sprintf("pid:%d", t.pid)
	if strings.HasPrefix(spec, "gdb:") || strings.HasPrefix(spec, "xen:") {
		t.name = spec
	}
	s.targets[t.name] = t
	return t, nil
}

func ptrLine(l LogLine) *LogLine { return &l }

func lookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in PATH", name)
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
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("remove: bad request: %w", err))
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
func (s *Server) Remove(req RemoveRequest) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	found := false
	if req.Target != "" && s.targets[req.Target] == nil {
		return 0, fmt.Errorf("remove: no target %q has probes", req.Target)
	}
	for name, t := range s.targets {
		if req.Target != "" && name != req.Target {
			continue
		}
		for _, mod := range t.eng.Modules() {
			if !req.All && mod != req.Module {
				continue
			}
			found = true
			k, _ := t.eng.Remove(mod, req.Minors)
			n += k
		}
		if len(t.eng.Modules()) == 0 {
			// nothing left in it: let it go
			if err := t.eng.Close(); err != nil {
				fmt.Fprintf(os.Stderr, "gprobes daemon: detach %s: %v\n", name, err)
			}
			delete(s.targets, name)
		}
	}
	if !found && !req.All {
		if req.Target != "" {
			return 0, fmt.Errorf("remove: no module %q is inserted in %s", req.Module, req.Target)
		}
		return 0, fmt.Errorf("remove: no module %q is inserted", req.Module)
	}
	return n, nil
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
}

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
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &VarsResponse{Modules: []VarsModule{}}
	gvars := 0
	for _, name := range s.sortedTargets() {
		t := s.targets[name]
		for _, mod := range t.eng.Modules() {
			if module != "" && mod != module {
				continue
			}
			lv, gv, err := t.eng.Vars(mod, reset)
			if err != nil {
				continue
			}
			gvars = max(gvars, len(gv))
			resp.Modules = append(resp.Modules, VarsModule{Target: name, Module: mod, LV: decimal(lv)})
		}
	}
	if module != "" && len(resp.Modules) == 0 {
		return nil, fmt.Errorf("getvars: no module %q is inserted", module)
	}
	s.gvLock.Lock()
	resp.GV = decimal(s.gv[:gvars])
	s.gvLock.Unlock()
	return resp, nil
}

func decimal(v []uint64) []string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = strconv.FormatUint(x, 10)
	}
	return out
}

func (s *Server) sortedTargets() []string {
	var out []string
	for n := range s.targets {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (s *Server) handleProbes(w http.ResponseWriter, r *http.Request) {
	module := r.URL.Query().Get("module")
	probes := s.Probes(module)
	if module != "" && len(probes) == 0 {
		writeErr(w, http.StatusNotFound, fmt.Errorf("query: no module %q is inserted", module))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"probes": probes})
}

// Probes lists the probes of one module ("" for all).
func (s *Server) Probes(module string) []TargetProbe {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []TargetProbe{}
	for _, name := range s.sortedTargets() {
		for _, p := range s.targets[name].eng.Query() {
			if module == "" || p.Module == module {
				lost, slost := s.log.Lost(name, p.Module, p.Minor)
				out = append(out, TargetProbe{Target: name, ProbeInfo: p, Lost: lost, SyslogLost: slost})
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
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	st := StatusResponse{Pid: os.Getpid(), Socket: s.socket, State: s.state, Log: s.log.Path(), Since: s.started, Targets: map[string]string{}, LogStatus: s.log.Status()}
	for n, t := range s.targets {
		if g := t.eng.Gone(); g != "" {
			st.Targets[n] = "gone: " + g
		} else {
			st.Targets[n] = "running"
		}
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, st)
}
