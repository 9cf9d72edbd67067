package linuxkernel

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Vmlinux is the first symbol file given that is an ELF image (a vmlinux,
// which gdb reads symbols and types from), or "".
func (k *Kernel) Vmlinux() string {
	for _, p := range k.opts.Symbols {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		var magic [4]byte
		_, err = f.ReadAt(magic[:], 0)
		f.Close()
		if err == nil && bytes.Equal(magic[:], []byte("\x7fELF")) {
			if abs, err := filepath.Abs(p); err == nil {
				return abs
			}
			return p
		}
	}
	return ""
}

// GDBCommand is the gdb command line that attaches to a GDB stub at
// remote (host:port) with the kernel's symbols, moved by the KASLR slide:
// what exit 4 prints for a guest.
func (k *Kernel) GDBCommand(remote string) string {
	var b strings.Builder
	b.WriteString("gdb")
	if v := k.Vmlinux(); v != "" {
		if slide, ok := k.Slide(); ok && slide != 0 {
			fmt.Fprintf(&b, " -ex %s", ShellQuote(fmt.Sprintf("symbol-file -o %#x %s", slide, v)))
		} else {
			b.WriteString(" " + ShellQuote(v))
		}
	}
	fmt.Fprintf(&b, " -ex %s", ShellQuote("target remote "+remote))
	return b.String()
}

// ShellQuote quotes s for a POSIX shell when it needs it.
func ShellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-:=,+@", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
