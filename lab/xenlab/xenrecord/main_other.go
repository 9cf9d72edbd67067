//go:build !linux

package main

import "github.com/gprobes/gprobes/xen"

func run(args []string) error { return xen.ErrNotSupported }
