package ppdf

import (
	"bytes"
	"encoding/binary"
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
		func() []byte { return mustEncodePack(f, packBuilds()) },
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
			// as a body of every version Decode reads
			for v := uint16(MinVersion); v <= Version; v++ {
				b := []byte(magic)
				b = append(b, byte(v), byte(v>>8), 0, 0, 0, 0)
				b = append(b, data[preambleSize:len(data)-checksumSize]...)
				checkDecode(t, seal(b))
			}
		}
	})
}

var errorClasses = []error{ErrNotPPDF, ErrVersion, ErrTruncated, ErrChecksum, ErrTrailing, ErrInvalid, ErrLimit}

func checkDecode(t *testing.T, data []byte) {
	if m, _, err := decode(data); err != nil && m != nil {
		t.Fatalf("decode returned a module and the error %v", err)
	}
	builds, skipped, err := decodePack(data)
	if err != nil {
		if builds != nil {
			t.Fatalf("decodePack returned builds and the error %v", err)
		}
		for _, class := range errorClasses {
			if errors.Is(err, class) {
				return
			}
		}
		t.Fatalf("decode error %q is none of the documented errors", err)
	}
	b, err := EncodePack(builds)
	if err != nil {
		t.Fatalf("DecodePack accepted builds EncodePack refuses: %v", err)
	}
	if version := binary.LittleEndian.Uint16(data[len(magic):]); version < ModuleVersion {
		// an older version is read, and written again as the current one
		m2, err := DecodePack(b)
		if err != nil || !reflect.DeepEqual(builds, m2) {
			t.Fatalf("re-encoding a version %d file: %v", version, err)
		}
		return
	}
	if !skipped {
		if !bytes.Equal(b, data) {
			t.Fatalf("EncodePack(DecodePack(data)) != data: the encoding is not canonical")
		}
		return
	}
	m2, err := DecodePack(b)
	if err != nil || !reflect.DeepEqual(builds, m2) {
		t.Fatalf("re-encoding a file with optional sections: %v", err)
	}
}
