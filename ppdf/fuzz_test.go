package ppdf

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzDecode checks that Decode never panics, that every error it returns
// is one of the documented classes, and that the encoding is canonical: when
// Decode accepts the input, Encode of the result gives back the very same
// bytes (unless the input had optional sections, which a reader drops).
//
// A random mutation almost never keeps the SHA-256 valid, so each input is
// also tried as a body: the fuzzer's bytes between the preamble and the
// checksum, sealed with a correct length and checksum. That lets the fuzzer
// reach the section parser and validate.
func FuzzDecode(f *testing.F) {
	for _, m := range []func() []byte{
		func() []byte { return mustEncode(f, tinyModule()) },
		func() []byte { return mustEncode(f, fullModule()) },
		func() []byte { return mustEncode(f, emptyModule()) },
		func() []byte { return mustEncode(f, manyModule(3)) },
		func() []byte {
			return patch(f, func(s []section) []section { return append(s, section{0x80, []byte("future")}) })
		},
	} {
		f.Add(m())
	}
	golden, _ := filepath.Glob(filepath.Join("testdata", "*.ppdf"))
	for _, g := range golden {
		b, err := os.ReadFile(g)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("name = ./a.out\nmodtype = user\n"))
	f.Add([]byte(magic))

	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
		if len(data) >= minFileSize {
			b := []byte(magic)
			b = append(b, byte(Version), byte(Version>>8), 0, 0, 0, 0)
			b = append(b, data[preambleSize:len(data)-checksumSize]...)
			checkDecode(t, seal(b))
		}
	})
}

var errorClasses = []error{ErrNotPPDF, ErrVersion, ErrTruncated, ErrChecksum, ErrTrailing, ErrInvalid, ErrLimit}

func checkDecode(t *testing.T, data []byte) {
	m, skipped, err := decode(data)
	if err != nil {
		if m != nil {
			t.Fatalf("decode returned a module and the error %v", err)
		}
		for _, class := range errorClasses {
			if errors.Is(err, class) {
				return
			}
		}
		t.Fatalf("decode error %q is none of the documented errors", err)
	}
	b, err := Encode(m)
	if err != nil {
		t.Fatalf("Decode accepted a module Encode refuses: %v", err)
	}
	if !skipped {
		if !bytes.Equal(b, data) {
			t.Fatalf("Encode(Decode(data)) != data: the encoding is not canonical")
		}
		return
	}
	m2, err := Decode(b)
	if err != nil || !reflect.DeepEqual(m, m2) {
		t.Fatalf("re-encoding a file with optional sections: %v", err)
	}
}
