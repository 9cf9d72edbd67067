package gdbremote

// The wire format, as the GDB manual's "Overview" of the Remote Protocol
// specifies it:
//
//	$<data>#<two lowercase hex digits: sum of the bytes of data, mod 256>
//	%<data>#<checksum>      notification (only after a feature enables it)
//	+ / -                   acknowledgement of a packet (ack mode only)
//	0x03                    interrupt, client to stub, outside any packet
//
// Inside data, a stub may compress a run with '*': "0* " is "0000" (the
// byte after '*' is the repeat count plus 29). The checksum covers the data
// as sent, compressed. Binary data (X, x and qXfer replies) escapes '#',
// '$', '}' and '*' as '}' followed by the byte XOR 0x20; escapes are
// applied before run-length compression, so a reader expands runs first and
// unescapes binary payloads second (gdb's remote.c does the same).

import (
	"bufio"
	"errors"
	"fmt"
	"strconv"
)

// maxPacket bounds one decoded packet. The largest reply this client asks
// for is a g block or a memory chunk of a few KiB; anything this long is a
// broken stream, not a reply.
const maxPacket = 1 << 22

const hexDigits = "0123456789abcdef"

// frame is one unit read off the wire.
type frame struct {
	kind  byte   // '$' packet, '%' notification, '+' or '-' ack
	data  []byte // packet data, runs expanded, binary escapes left in place
	sumOK bool   // the checksum matched
}

var (
	errTooLong = errors.New("packet longer than 4 MiB")
	errBadRLE  = errors.New("bad run-length encoding")
)

// readFrame reads the next frame. Bytes outside a frame other than acks are
// skipped, as stubs and gdb do. A checksum mismatch is reported through
// sumOK, not as an error: the stream is still in step. A malformed run
// (a '*' with nothing before it or a count below 0) makes sumOK false too.
// The returned data is a fresh slice.
func readFrame(r *bufio.Reader) (frame, error) {
	for {
		b, err := r.ReadByte()
		if err != nil {
			return frame{}, err
		}
		switch b {
		case '+', '-':
			return frame{kind: b}, nil
		case '$', '%':
			return readBody(r, b)
		}
	}
}

func readBody(r *bufio.Reader, kind byte) (frame, error) {
	var raw []byte
	var sum byte
	for {
		chunk, err := r.ReadSlice('#')
		if err != nil && err != bufio.ErrBufferFull {
			return frame{}, err
		}
		for _, c := range chunk {
			sum += c
		}
		raw = append(raw, chunk...)
		if len(raw) > maxPacket {
			return frame{}, errTooLong
		}
		if err == nil {
			break
		}
	}
	sum -= '#'
	raw = raw[:len(raw)-1]
	var cs [2]byte
	for i := range cs {
		c, err := r.ReadByte()
		if err != nil {
			return frame{}, err
		}
		cs[i] = c
	}
	want, err := strconv.ParseUint(string(cs[:]), 16, 8)
	f := frame{kind: kind, sumOK: err == nil && byte(want) == sum}
	data, err := expandRuns(raw)
	if err != nil {
		f.sumOK = false
		data = raw
	}
	f.data = data
	return f, nil
}

// expandRuns undoes run-length encoding: "x*N" repeats x N-29 more times.
func expandRuns(raw []byte) ([]byte, error) {
	n := 0
	for i := 0; i < len(raw); i++ {
		if raw[i] == '*' {
			if i == 0 || i+1 >= len(raw) || raw[i+1] < 29 {
				return nil, errBadRLE
			}
			n += int(raw[i+1]) - 29
			i++
			continue
		}
		n++
	}
	if n == len(raw) {
		return raw, nil
	}
	if n > maxPacket {
		return nil, errTooLong
	}
	out := make([]byte, 0, n)
	for i := 0; i < len(raw); i++ {
		if raw[i] == '*' {
			prev := out[len(out)-1]
			for k := int(raw[i+1]) - 29; k > 0; k-- {
				out = append(out, prev)
			}
			i++
			continue
		}
		out = append(out, raw[i])
	}
	return out, nil
}

// unescape removes binary escapes ("}x" is x^0x20) in place.
func unescape(b []byte) ([]byte, error) {
	j := 0
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c == '}' {
			i++
			if i >= len(b) {
				return nil, errors.New("binary data ends in an escape")
			}
			c = b[i] ^ 0x20
		}
		b[j] = c
		j++
	}
	return b[:j], nil
}

// needsEscape reports whether a byte of binary data must be escaped.
func needsEscape(c byte) bool {
	return c == '#' || c == '$' || c == '}' || c == '*'
}

// appendEscaped appends binary data with escapes.
func appendEscaped(dst, src []byte) []byte {
	for _, c := range src {
		if needsEscape(c) {
			dst = append(dst, '}', c^0x20)
			continue
		}
		dst = append(dst, c)
	}
	return dst
}

// frameOf wraps data into "$data#cs" in dst.
func frameOf(dst, data []byte) []byte {
	dst = append(dst[:0], '$')
	dst = append(dst, data...)
	var sum byte
	for _, c := range data {
		sum += c
	}
	return append(dst, '#', hexDigits[sum>>4], hexDigits[sum&15])
}

// appendHex appends the lowercase hex form of b.
func appendHex(dst, b []byte) []byte {
	for _, c := range b {
		dst = append(dst, hexDigits[c>>4], hexDigits[c&15])
	}
	return dst
}

func unhexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// decodeHex decodes hex pairs into dst, which must be len(src)/2 long.
// "xx" (a register the stub cannot read) decodes as 0 and sets unavail.
func decodeHex(dst, src []byte) (unavail bool, err error) {
	if len(src)%2 != 0 {
		return false, fmt.Errorf("odd-length hex data (%d digits)", len(src))
	}
	for i := 0; i < len(src); i += 2 {
		hi, ok1 := unhexDigit(src[i])
		lo, ok2 := unhexDigit(src[i+1])
		if !ok1 || !ok2 {
			if src[i] == 'x' && src[i+1] == 'x' {
				dst[i/2] = 0
				unavail = true
				continue
			}
			return false, fmt.Errorf("bad hex digit in %q", src[i:i+2])
		}
		dst[i/2] = hi<<4 | lo
	}
	return unavail, nil
}

// isHex reports whether s is a non-empty run of hex digits.
func isHex(s []byte) bool {
	if len(s) == 0 {
		return false
	}
	for _, c := range s {
		if _, ok := unhexDigit(c); !ok {
			return false
		}
	}
	return true
}
