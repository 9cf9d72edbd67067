package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"time"
)

// Client talks to a daemon over its socket.
type Client struct {
	socket string
	hc     *http.Client
}

// NewClient returns a client of the daemon at socket.
func NewClient(socket string) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}, ExpectContinueTimeout: 5 * time.Second}
	return &Client{socket: socket, hc: &http.Client{Transport: tr}}
}

// ErrNoDaemon means nothing listens on the socket.
var ErrNoDaemon = errors.New("no gprobes daemon")

func (c *Client) do(method, path string, in, out any) error {
	var body io.Reader
	large := false
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
		large = len(b) > 64<<10
	}
	req, err := http.NewRequest(method, "http://gprobes"+path, body)
	if err != nil {
		return err
	}
	if large {
		// the daemon refuses a body over its limit before it is sent,
		// and the refusal comes back instead of a broken pipe
		req.Header.Set("Expect", "100-continue")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("%w on %s: start one with \"gprobes daemon\" (or set --socket / GPROBES_SOCKET)", ErrNoDaemon, c.socket)
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		json.NewDecoder(resp.Body).Decode(&e)
		if e.Error == "" {
			e.Error = resp.Status
		}
		return errors.New(e.Error)
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}

// Insert sends a PPDF-encoded module to insert into target.
func (c *Client) Insert(req InsertRequest) (*InsertResponse, error) {
	var resp InsertResponse
	err := c.do("POST", "/v1/insert", req, &resp)
	return &resp, err
}

// Remove takes probes out.
func (c *Client) Remove(req RemoveRequest) (int, error) {
	var resp struct{ Removed int }
	err := c.do("POST", "/v1/remove", req, &resp)
	return resp.Removed, err
}

// Vars reads (and resets) variables.
func (c *Client) Vars(module string, reset bool) (*VarsResponse, error) {
	path := "/v1/vars"
	method := "GET"
	if reset {
		path, method = "/v1/vars/reset", "POST"
	}
	var resp VarsResponse
	err := c.do(method, path+"?module="+url.QueryEscape(module), nil, &resp)
	return &resp, err
}

// Probes lists probes.
func (c *Client) Probes(module string) ([]TargetProbe, error) {
	return c.ProbesBy(module, false)
}

// ProbesBy is Probes, with each probe's hits by process when processes is
// set (where the target counts them: the host target).
func (c *Client) ProbesBy(module string, processes bool) ([]TargetProbe, error) {
	var resp struct{ Probes []TargetProbe }
	q := "/v1/probes?module=" + url.QueryEscape(module)
	if processes {
		q += "&processes=1"
	}
	err := c.do("GET", q, nil, &resp)
	return resp.Probes, err
}

// Status asks the daemon about itself.
func (c *Client) Status() (*StatusResponse, error) {
	var resp StatusResponse
	err := c.do("GET", "/v1/status", nil, &resp)
	return &resp, err
}

// LogLines streams the log's lines as they come (Log without decoding
// them), following it when asked, until ctx ends: SplitLog.
func (c *Client) LogLines(ctx context.Context, follow bool, line func(b []byte, lost bool) error, lost func(*LostLine) error, flush func() error) error {
	body, err := c.openLog(ctx, follow)
	if body == nil {
		return err
	}
	defer body.Close()
	return SplitLog(ctx, body, line, lost, flush)
}

// lostKind follows the time in a lost line, and in no record's line.
var lostKind = []byte(`","kind":"lost"`)

// isLost reports whether a line of the log stream is a lost line: a
// record's kind follows its time, {"time":"...","kind":"log".
func isLost(b []byte) bool {
	if len(b) < 10 {
		return false
	}
	i := bytes.IndexByte(b[10:min(len(b), 64)], '"')
	return i >= 0 && bytes.HasPrefix(b[10+i:], lostKind)
}

// SplitLog reads a log stream (JSON lines, as /v1/log and ReadLogFile
// write it) from r without decoding its records: each whole line goes to
// line (which may not keep it), with whether it is a lost line; a lost
// line is decoded for lost (if set) first. flush, if set, is called
// whenever the lines read so far are all passed on and more must be
// waited for.
func SplitLog(ctx context.Context, r io.Reader, line func(b []byte, lost bool) error, lost func(*LostLine) error, flush func() error) error {
	br := bufio.NewReaderSize(r, 256<<10)
	var long []byte
	for {
		if flush != nil && br.Buffered() == 0 {
			if err := flush(); err != nil {
				return err
			}
		}
		b, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			long = append(long[:0], b...)
			for err == bufio.ErrBufferFull {
				b, err = br.ReadSlice('\n')
				long = append(long, b...)
			}
			b = long
		}
		if len(b) > 0 && b[len(b)-1] == '\n' {
			isl := isLost(b)
			if isl && lost != nil {
				var ll LostLine
				if err := json.Unmarshal(b, &ll); err != nil {
					return err
				}
				if err := lost(&ll); err != nil {
					return err
				}
			}
			if err := line(b, isl); err != nil {
				return err
			}
		}
		if err == io.EOF || err != nil && ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Log streams the log: each record to f, following it when asked, until
// ctx ends. The lines that say records were lost (kind "lost") go to lost,
// or are skipped if lost is nil.
func (c *Client) Log(ctx context.Context, follow bool, f func(*LogLine) error, lost func(*LostLine) error) error {
	body, err := c.openLog(ctx, follow)
	if body == nil {
		return err
	}
	defer body.Close()
	return DecodeLog(ctx, body, f, lost)
}

// openLog asks for the log's stream (following it when asked): nil and
// no error when ctx ended before the daemon answered.
func (c *Client) openLog(ctx context.Context, follow bool) (io.ReadCloser, error) {
	path := "/v1/log"
	if follow {
		path += "?follow=1"
	}
	req, err := http.NewRequestWithContext(ctx, "GET", "http://gprobes"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, fmt.Errorf("%w on %s: %v", ErrNoDaemon, c.socket, err)
	}
	return resp.Body, nil
}

// DecodeLog calls f for each record of a log stream (JSON lines, as the
// daemon's API and ReadLogFile write it) and lost for each count of lost
// records, until the stream ends or ctx does.
func DecodeLog(ctx context.Context, r io.Reader, f func(*LogLine) error, lost func(*LostLine) error) error {
	dec := json.NewDecoder(r)
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if err == io.EOF || ctx.Err() != nil {
				return nil
			}
			return err
		}
		var l LogLine
		if err := json.Unmarshal(raw, &l); err != nil {
			return err
		}
		if l.Kind == "lost" {
			if lost == nil {
				continue
			}
			var ll LostLine
			if err := json.Unmarshal(raw, &ll); err != nil {
				return err
			}
			if err := lost(&ll); err != nil {
				return err
			}
			continue
		}
		if err := f(&l); err != nil {
			return err
		}
	}
}
