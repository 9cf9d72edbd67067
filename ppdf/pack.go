package ppdf

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/gprobes/gprobes/rpn"
)

// A pack is the compiled modules of one DPDF for several builds of the
// probed module (several kernels, several builds of a library): the same
// probes, each build with its own build ID, resolved addresses and
// relocation values. The target picks the build whose build ID it runs
// (engine.SelectBuild). A pack of one build is an ordinary version 4
// file; several builds make a version 5 file (encode.go).

// EncodePack returns the PPDF encoding of the builds of one module: for
// one build, what Encode writes (version 4); for several, a version 5
// file with the builds in the order of their build IDs, so that the order
// they were given in does not change the bytes. The builds must be of the
// same DPDF (validatePack says what that means) and have distinct,
// non-empty build IDs.
func EncodePack(builds []*rpn.Module) ([]byte, error) {
	switch len(builds) {
	case 0:
		return nil, errors.New("encode: a pack of no build")
	case 1:
		return Encode(builds[0])
	}
	sorted := slices.Clone(builds)
	slices.SortStableFunc(sorted, func(a, b *rpn.Module) int { return bytes.Compare(a.BuildID, b.BuildID) })
	size := uint64(preambleSize + checksumSize)
	for i, m := range sorted {
		if m == nil {
			return nil, errors.New("encode: nil module")
		}
		if sect, err := validate(m); err != nil {
			return nil, fmt.Errorf("build %d: %w", i, wrap("encode", sect, err))
		}
		size += sectionHead + moduleSize(m)
	}
	size += formatsSize(sorted[0])
	if sect, err := validatePack(sorted); err != nil {
		return nil, wrap("encode", sect, err)
	}
	if size > MaxFileSize {
		return nil, limitf("encode: the PPDF would be %d bytes, at most %d", size, uint64(MaxFileSize))
	}
	e := encoder{buf: make([]byte, 0, size)}
	e.buf = append(e.buf, magic...)
	e.u16(Version)
	e.u32(uint32(size))
	for _, m := range sorted {
		s := e.begin(tagBuild)
		e.module(m)
		e.end(s)
	}
	e.formats(sorted[0])
	sum := sha256.Sum256(e.buf)
	e.buf = append(e.buf, sum[:]...)
	return e.buf, nil
}

// DecodePack decodes a PPDF of any version Decode reads into its builds:
// one for versions 2 to 4, two or more, sorted by build ID, for version 5.
// Like Decode it checks everything but the bytecode.
func DecodePack(data []byte) ([]*rpn.Module, error) {
	builds, _, err := decodePack(data)
	return builds, err
}

// validatePack checks the builds of a version 5 file, sorted: at least
// two, each with a build ID, no two alike, and the same module apart from
// what depends on the build: the header, the files, the fields, the length
// of the code and, probe by probe, everything but the location's data, the
// resolved address and the expected opcode. The engine keeps one set of
// probes for a module and takes a build's locations and program where
// that build is loaded; probes that differ would not be one module.
func validatePack(builds []*rpn.Module) (section string, err error) {
	if len(builds) < 2 {
		return "sections", invalidf("a version 5 file holds %d build sections: a pack of one build is written as version %d", len(builds), ModuleVersion)
	}
	first := builds[0]
	for i, m := range builds {
		switch {
		case len(m.BuildID) == 0:
			return "build ID", invalidf("build %d of %s has no build ID: the builds of a pack are told apart by build ID", i, m.Name)
		case i > 0 && bytes.Equal(m.BuildID, builds[i-1].BuildID):
			return "build ID", invalidf("builds %d and %d both have build ID %x: a build is in a pack once", i-1, i, m.BuildID)
		case i > 0 && bytes.Compare(m.BuildID, builds[i-1].BuildID) < 0:
			return "build ID", invalidf("build %d (%x) comes after build %d (%x): builds are sorted by build ID", i, m.BuildID, i-1, builds[i-1].BuildID)
		case i == 0:
			continue
		case m.Header != first.Header:
			return "header", invalidf("build %d (%x) has another header than build 0 (%x): the builds of a pack are one DPDF's", i, m.BuildID, first.BuildID)
		case !slices.Equal(m.Files, first.Files):
			return "files", invalidf("build %d (%x) has other source files than build 0: the builds of a pack are one DPDF's", i, m.BuildID)
		case !slices.Equal(m.Fields, first.Fields):
			return "fields", invalidf("build %d (%x) has other tracepoint fields than build 0: the builds of a pack are one DPDF's", i, m.BuildID)
		case len(m.Code) != len(first.Code) || len(m.Probes) != len(first.Probes):
			return "probes", invalidf("build %d (%x) has %d probes and %d bytes of code, build 0 %d and %d: the builds of a pack are one DPDF's", i, m.BuildID, len(m.Probes), len(m.Code), len(first.Probes), len(first.Code))
		}
		for j := range m.Probes {
			if !sameProbe(&m.Probes[j], &first.Probes[j]) {
				return "probes", invalidf("build %d (%x): probe %d (%s) differs from build 0's (%s) in more than its address: the builds of a pack are one DPDF's", i, m.BuildID, j, m.Probes[j].Loc.Text, first.Probes[j].Loc.Text)
			}
		}
	}
	return "", nil
}

// sameProbe says whether two builds' probes are one DPDF probe: alike but
// for what resolving against a build gives (the address, the location's
// resolved flag and the expected opcode read from the build's code).
func sameProbe(a, b *rpn.Probe) bool {
	x, y := *a, *b
	for _, p := range []*rpn.Probe{&x, &y} {
		p.Loc.Addr, p.Loc.Resolved, p.Opcode = 0, false, 0
	}
	return reflect.DeepEqual(x, y)
}

// BuildList spells the build IDs of builds for messages: "eb4f…56f (6.1),
// 4a5a…5fa9" would hide too much, so each is written whole, in hex.
func BuildList(builds []*rpn.Module) string {
	ids := make([]string, len(builds))
	for i, b := range builds {
		ids[i] = BuildIDString(b.BuildID)
	}
	return strings.Join(ids, ", ")
}

// BuildIDString is a build ID in hex, or "none" when it is empty.
func BuildIDString(id []byte) string {
	if len(id) == 0 {
		return "none"
	}
	return hex.EncodeToString(id)
}
