package xen

import (
	"net"
	"path/filepath"
	"testing"
	"time"
)

// TestWatchReleases runs the watch against a fake xenstored: the request
// on the wire, an event before the answer, events after it, an error
// answer, the end of the connection.
func TestWatchReleases(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "socket")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	old := xenstoreSockets
	xenstoreSockets = []string{filepath.Join(t.TempDir(), "none"), sock}
	defer func() { xenstoreSockets = old }()

	serve := func(answer func(c net.Conn)) {
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			typ, p, err := xsRead(c)
			if err != nil || typ != xsWatch || string(p) != "@releaseDomain\x00gprobes\x00" {
				t.Errorf("request: type %d %q %v", typ, p, err)
			}
			answer(c)
		}()
	}
	event := func(c net.Conn) { xsWrite(c, xsWatchEvent, 0, []byte("@releaseDomain\x00gprobes\x00")) }

	seen := make(chan bool)
	serve(func(c net.Conn) {
		event(c) // xenstored fires a new watch at once, maybe before the answer
		xsWrite(c, xsWatch, 1, []byte("OK\x00"))
		event(c)
		event(c)
		<-seen // the end comes after the three events were taken
		c.Close()
	})
	fired := make(chan bool, 10)
	ended := make(chan bool, 1)
	w, err := watchReleases(func() { fired <- true }, func() { ended <- true })
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := 0; i < 3; i++ {
		select {
		case <-fired:
		case <-time.After(5 * time.Second):
			t.Fatalf("%d events of 3", i)
		}
	}
	close(seen)
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the end of the connection went unnoticed")
	}

	serve(func(c net.Conn) {
		xsWrite(c, xsError, 1, []byte("EACCES\x00"))
	})
	if _, err := watchReleases(func() {}, func() {}); err == nil || err.Error() != "xen: xenstore watch @releaseDomain: EACCES" {
		t.Errorf("error answer: %v", err)
	}

	serve(func(c net.Conn) {
		c.Write([]byte{15, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0}) // 65535 bytes announced
	})
	if _, err := watchReleases(func() {}, func() {}); err == nil {
		t.Error("an oversized message was taken")
	}
}
