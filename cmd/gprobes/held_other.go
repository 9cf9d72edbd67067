//go:build !linux

package main

import "errors"

// heldCommand: run --target kernel is Linux's (platform_other.go stops run
// before it gets here).
type heldCommand struct{ pid int }

func startHeld(argv []string) (*heldCommand, error) {
	return nil, errors.New("run --target kernel needs Linux")
}
func (h *heldCommand) unlock() {}
func (h *heldCommand) kill()   {}
func (h *heldCommand) run(func(int)) (<-chan struct{}, error) {
	return nil, errors.New("run --target kernel needs Linux")
}
