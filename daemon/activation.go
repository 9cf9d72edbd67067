package daemon

import (
	"fmt"
	"net"
	"os"
	"strconv"
)

// Socket activation (systemd's sd_listen_fds(3) protocol): when systemd
// (or systemd-socket-activate) starts the daemon for its socket unit
// (dist/systemd/gprobes.socket), it passes the listening socket as file
// descriptor 3 and sets LISTEN_PID to the daemon's pid and LISTEN_FDS to 1.
// The daemon then serves that socket instead of creating one: systemd
// owns its path and mode (the unit's SocketMode), so the daemon neither
// replaces nor removes it. The variables are unset once read, so that the
// processes the daemon starts (exec: targets, its guard) do not see them.

// listenFDsStart is the first descriptor systemd passes (SD_LISTEN_FDS_START).
const listenFDsStart = 3

// activated takes the socket systemd passed, if it did: it returns the
// listener (nil when the daemon was not socket-activated) and sets the
// server up to serve it.
func (s *Server) activated() (net.Listener, error) {
	pid, fds := os.Getenv("LISTEN_PID"), os.Getenv("LISTEN_FDS")
	if pid == "" || fds == "" || pid != strconv.Itoa(os.Getpid()) {
		return nil, nil
	}
	os.Unsetenv("LISTEN_PID")
	os.Unsetenv("LISTEN_FDS")
	os.Unsetenv("LISTEN_FDNAMES")
	n, err := strconv.Atoi(fds)
	if err != nil || n != 1 {
		return nil, fmt.Errorf("socket activation: LISTEN_FDS=%s: the daemon serves one socket (one ListenStream= in its socket unit)", fds)
	}
	f := os.NewFile(listenFDsStart, "LISTEN_FDS")
	ln, err := net.FileListener(f) // a duplicate, close-on-exec
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("socket activation: descriptor %d: %w", listenFDsStart, err)
	}
	ul, ok := ln.(*net.UnixListener)
	if !ok {
		ln.Close()
		return nil, fmt.Errorf("socket activation: descriptor %d is a %s socket, not a Unix stream socket (ListenStream=/run/gprobes/gprobes.sock)", listenFDsStart, ln.Addr().Network())
	}
	ul.SetUnlinkOnClose(false) // systemd's socket: its path stays
	s.socket = ul.Addr().String()
	cl := newConnLimiter(ul, s.Limits.maxConns())
	s.ln = cl
	s.http = s.Limits.httpServer(s.handler(), cl)
	return ul, nil
}
