//go:build linux

package bpf

import (
	"time"

	"github.com/cilium/ebpf/ringbuf"
)

// Reader reads the records of a ring buffer.
type Reader struct {
	r   *ringbuf.Reader
	rec ringbuf.Record
}

// NewReader reads the ring buffer of m.
func NewReader(m *Maps) (*Reader, error) {
	r, err := ringbuf.NewReader(m.Ring)
	if err != nil {
		return nil, err
	}
	return &Reader{r: r}, nil
}

// Read waits for the next record (until the deadline: os.ErrDeadlineExceeded).
// The record's log is valid until the next Read.
func (r *Reader) Read() (Record, error) {
	if err := r.r.ReadInto(&r.rec); err != nil {
		return Record{}, err
	}
	return ParseRecord(r.rec.RawSample)
}

// SetDeadline sets when Read gives up waiting; the zero time: never.
func (r *Reader) SetDeadline(t time.Time) { r.r.SetDeadline(t) }

// Available is the number of bytes of records waiting.
func (r *Reader) Available() int { return r.r.AvailableBytes() }

// Close stops the reader.
func (r *Reader) Close() error { return r.r.Close() }
