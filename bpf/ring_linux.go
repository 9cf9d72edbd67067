//go:build linux

package bpf

import (
	"errors"
	"os"
	"time"

	"github.com/cilium/ebpf/ringbuf"
)

// Reader reads the records of a ring buffer. The programs wake it only
// when Options.Wakeup bytes wait, so it also polls: a record waits at most
// Poll before Read returns it.
type Reader struct {
	Poll     time.Duration // 0: DefaultPoll
	r        *ringbuf.Reader
	rec      ringbuf.Record
	deadline time.Time
}

// DefaultPoll is Reader.Poll's default.
const DefaultPoll = 50 * time.Millisecond

// NewReader reads the ring buffer of m.
func NewReader(m *Maps) (*Reader, error) {
	r, err := ringbuf.NewReader(m.Ring)
	if err != nil {
		return nil, err
	}
	return &Reader{r: r}, nil
}

// Read waits for the next record, until the deadline
// (os.ErrDeadlineExceeded). The record's log is valid until the next Read.
func (r *Reader) Read() (Record, error) {
	poll := r.Poll
	if poll <= 0 {
		poll = DefaultPoll
	}
	for {
		now := time.Now()
		dl := now.Add(poll)
		if r.r.AvailableBytes() > 0 {
			dl = now // records wait: no need to
		}
		if !r.deadline.IsZero() && r.deadline.Before(dl) {
			dl = r.deadline
		}
		r.r.SetDeadline(dl)
		err := r.r.ReadInto(&r.rec)
		if err == nil {
			return ParseRecord(r.rec.RawSample)
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return Record{}, err
		}
		if !r.deadline.IsZero() && !time.Now().Before(r.deadline) {
			return Record{}, err
		}
	}
}

// SetDeadline sets when Read gives up waiting; the zero time: never.
func (r *Reader) SetDeadline(t time.Time) { r.deadline = t }

// Available is the number of bytes of records waiting.
func (r *Reader) Available() int { return r.r.AvailableBytes() }

// Close stops the reader; a Read waiting returns os.ErrClosed.
func (r *Reader) Close() error { return r.r.Close() }
