package rpn_test

import (
	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/rpn"
)

// The seeds of FuzzVM are DPDF programs, compiled by package compiler,
// which links rpn: an external test package may import it, rpn's own
// tests may not.
func init() {
	rpn.CompileSource = func(name, text string) (*rpn.Module, error) {
		f, err := dpdf.ParseSource(name, []byte(text), dpdf.Options{NoPreprocessor: true})
		if err != nil {
			return nil, err
		}
		return compiler.Compile(f, rpn.CompileOptions{})
	}
}
