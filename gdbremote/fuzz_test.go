package gdbremote

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// FuzzDecode feeds arbitrary bytes to the packet reader and every decoder
// of reply contents: none may panic, and a frame's data never exceeds the
// limit.
func FuzzDecode(f *testing.F) {
	for _, c := range frameCases {
		f.Add([]byte(c.wire))
	}
	f.Add([]byte("+$T05swbreak:;06:0100000000000000;10:0611400000000000;thread:p6cd7.6cd7;core:1;#00"))
	f.Add([]byte("$W7;process:6f2b#00$X09#00$O48690a#00%Stop:T05#00"))
	f.Add([]byte("$l<target><xi:include href=\"a.xml\"/><reg name=\"r\" bitsize=\"64\" regnum=\"3\"/></target>#00"))
	f.Add([]byte("$b}]}\x03}\x04}\n#00$mp01.01,p01.02,-1,p1#00"))
	f.Add([]byte("$0*~1*\x1d2*}#00"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bufio.NewReader(bytes.NewReader(in))
		for {
			fr, err := readFrame(r)
			if err != nil {
				return
			}
			if len(fr.data) > maxPacket {
				t.Fatalf("frame of %d bytes", len(fr.data))
			}
			d := fr.data
			isStopReply(d)
			parseStop(d)
			isConsoleOutput(d)
			isErrorReply(d)
			errnoOf(string(d))
			parseThread(string(d))
			if len(d) > 0 {
				if b, err := unescape(append([]byte(nil), d[1:]...)); err == nil && len(b) > len(d) {
					t.Fatal("unescape grew the data")
				}
			}
			out := make([]byte, len(d)/2)
			decodeHex(out, d[:len(d)&^1])
			parseTargetDescription(func(annex string) ([]byte, error) {
				if annex == "target.xml" {
					return d, nil
				}
				return []byte(`<feature><reg name="x" bitsize="8"/></feature>`), nil
			})
			_ = (&ReplyError{Reply: string(d)}).Error()
		}
	})
}

// FuzzHandshake plays arbitrary bytes as a stub's side of a connection:
// NewConn must return (a Conn or an error), never panic or hang.
func FuzzHandshake(f *testing.F) {
	f.Add([]byte("$T02thread:01;#b6$PacketSize=1000;qXfer:features:read+;multiprocess+#00$#00$vCont;c;s#00$T05thread:p01.01;#00$OK#9a$l<target><reg name=\"rip\" bitsize=\"64\"/></target>#00"))
	f.Add([]byte("+$PacketSize=10;QStartNoAckMode+#00+$OK#9a$vCont;c;C;s;S#00$W00#00"))
	f.Add([]byte("$E22#00-$E22#00"))
	f.Fuzz(func(t *testing.T, in []byte) {
		cc, sc := net.Pipe()
		go io.Copy(io.Discard, sc)
		go func() {
			sc.Write(in)
			sc.Close()
		}()
		c, err := NewConn(t.Context(), cc, Options{Timeout: 2 * time.Second})
		if err != nil {
			if errors.Is(err, ErrTimeout) {
				t.Fatalf("timeout on a closed stream: %v", err)
			}
			return
		}
		c.Registers()
		c.Close()
	})
}
