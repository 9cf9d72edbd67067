package xen

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
)

// xenstore's wire protocol (xen/include/public/io/xs_wire.h): a 16-byte
// header {type, req_id, tx_id, len}, then len bytes of payload.
const (
	xsWatch      = 4
	xsError      = 16
	xsWatchEvent = 15
	xsMaxPayload = 4096
)

// xenstoreSockets are where xenstored listens in dom0; /dev/xen/xenbus
// (the kernel's proxy, the same protocol) is the fallback.
var xenstoreSockets = []string{"/run/xenstored/socket", "/var/run/xenstored/socket"}

// watchReleases watches xenstore's @releaseDomain, which xenstored fires
// whenever a domain is destroyed (and the first time at once), and calls
// fired for every event until the connection fails, then ended.
func watchReleases(fired, ended func()) (io.Closer, error) {
	var conn io.ReadWriteCloser
	var errs []error
	for _, p := range xenstoreSockets {
		c, err := net.Dial("unix", p)
		if err == nil {
			conn = c
			break
		}
		errs = append(errs, err)
	}
	if conn == nil {
		f, err := os.OpenFile("/dev/xen/xenbus", os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("xen: xenstore: %w", errors.Join(append(errs, err)...))
		}
		conn = f
	}
	if err := xsWrite(conn, xsWatch, 1, []byte("@releaseDomain\x00gprobes\x00")); err != nil {
		conn.Close()
		return nil, fmt.Errorf("xen: xenstore watch: %w", err)
	}
	typ, payload, err := xsRead(conn)
	for err == nil && typ == xsWatchEvent { // an event may come before the answer
		fired()
		typ, payload, err = xsRead(conn)
	}
	if err == nil && typ == xsError {
		err = fmt.Errorf("%s", bytes.TrimRight(payload, "\x00"))
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("xen: xenstore watch @releaseDomain: %w", err)
	}
	go func() {
		for {
			typ, _, err := xsRead(conn)
			if err != nil {
				ended()
				return
			}
			if typ == xsWatchEvent {
				fired()
			}
		}
	}()
	return conn, nil
}

func xsWrite(w io.Writer, typ, req uint32, payload []byte) error {
	msg := make([]byte, 16+len(payload))
	binary.LittleEndian.PutUint32(msg[0:], typ)
	binary.LittleEndian.PutUint32(msg[4:], req)
	binary.LittleEndian.PutUint32(msg[12:], uint32(len(payload)))
	copy(msg[16:], payload)
	_, err := w.Write(msg)
	return err
}

// xsRead reads one message. The socket is a stream; /dev/xen/xenbus hands
// out whole messages, which a read of the header and one of the payload
// take apart just as well.
func xsRead(r io.Reader) (uint32, []byte, error) {
	var h [16]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint32(h[12:])
	if n > xsMaxPayload {
		return 0, nil, fmt.Errorf("xenstore message of %d bytes", n)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return 0, nil, err
	}
	return binary.LittleEndian.Uint32(h[0:]), p, nil
}
