package gdbremote

import (
	"bytes"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
)

// traceTo returns a packet log writer for a test: t.Log, line by line,
// when GDBREMOTE_TRACE=1, else nil.
func traceTo(t testing.TB) io.Writer {
	if os.Getenv("GDBREMOTE_TRACE") != "1" {
		return nil
	}
	return &tlog{t: t}
}

type tlog struct {
	t   testing.TB
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *tlog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line)
			return len(p), nil
		}
		w.t.Log(strings.TrimSuffix(line, "\n"))
	}
}
