package daemon

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A handler slower than WriteTimeout (a long insert) still gets its
// answer out: the deadline runs from the response's start (the tests of
// limits_test.go cut a client that stops reading).
func TestWriteDeadlineFromResponseStart(t *testing.T) {
	s := &Server{Limits: Limits{WriteTimeout: 200 * time.Millisecond}}
	h := s.bounded(noBody, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(600 * time.Millisecond) // working, nothing written yet
		io.WriteString(w, "done")
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatalf("a slow handler's answer was lost: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "done" {
		t.Fatalf("answer %q", b)
	}
}
