package daemon

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
)

// Switching from outside (gprobes enable and disable; docs/api.md,
// "POST /v1/enable, /v1/disable"): a module's probes, those with the
// given minors or all, switched on or off in every target that has the
// module (or in one).

// SwitchRequest is the body of POST /v1/enable and POST /v1/disable.
type SwitchRequest struct {
	Module string   `json:"module"`
	Minors []uint16 `json:"minors,omitempty"`
	// Target, when set, limits the switch to that target (as inserted);
	// otherwise the module is switched in every target that has it.
	Target string `json:"target,omitempty"`
}

// SwitchResponse is their answer: how many probes the switch concerns.
type SwitchResponse struct {
	Switched int `json:"switched"`
}

// routeSwitch adds the switching endpoints to the API.
func (s *Server) routeSwitch(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/enable", s.bounded(maxRemoveBody, s.handleSwitch(true)))
	mux.HandleFunc("POST /v1/disable", s.bounded(maxRemoveBody, s.handleSwitch(false)))
}

func (s *Server) handleSwitch(on bool) http.HandlerFunc {
	what := "disable"
	if on {
		what = "enable"
	}
	return func(w http.ResponseWriter, r *http.Request) {
		var req SwitchRequest
		if code, err := decodeBody(w, r, what, &req); err != nil {
			writeErr(w, code, err)
			return
		}
		n, err := s.Switch(req, on)
		if err != nil {
			writeErr(w, http.StatusNotFound, err)
			return
		}
		writeJSON(w, http.StatusOK, SwitchResponse{Switched: n})
	}
}

// Switch switches a module's probes on or off (on: enable), those with
// the given minors or all of them, in every target that has the module
// (or req.Target's). A minor none of the module's probes has, in a target
// that has the module, is an error, and that target switches nothing.
func (s *Server) Switch(req SwitchRequest, on bool) (int, error) {
	what := "disable"
	if on {
		what = "enable"
	}
	if req.Module == "" {
		return 0, fmt.Errorf("%s: name a module", what)
	}
	targets := s.readyTargets()
	if req.Target != "" && !slices.ContainsFunc(targets, func(t *target) bool { return t.name == req.Target }) {
		return 0, fmt.Errorf("%s: no target %s has probes", what, short(req.Target))
	}
	n := 0
	found := false
	var errs []error
	for _, t := range targets {
		if req.Target != "" && t.name != req.Target {
			continue
		}
		t.mu.Lock()
		if t.closed || !slices.Contains(t.eng.Modules(), req.Module) {
			t.mu.Unlock()
			continue
		}
		found = true
		k, err := t.eng.Switch(req.Module, req.Minors, on)
		t.mu.Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %s: %w", what, t.name, err))
			continue
		}
		n += k
	}
	if !found {
		if req.Target != "" {
			return 0, fmt.Errorf("%s: no module %s is inserted in %s", what, short(req.Module), short(req.Target))
		}
		return 0, fmt.Errorf("%s: no module %s is inserted", what, short(req.Module))
	}
	return n, errors.Join(errs...)
}

// Enable switches probes on (gprobes enable).
func (c *Client) Enable(req SwitchRequest) (int, error) { return c.switchProbes("/v1/enable", req) }

// Disable switches probes off (gprobes disable).
func (c *Client) Disable(req SwitchRequest) (int, error) { return c.switchProbes("/v1/disable", req) }

func (c *Client) switchProbes(path string, req SwitchRequest) (int, error) {
	var resp SwitchResponse
	err := c.do("POST", path, req, &resp)
	return resp.Switched, err
}
