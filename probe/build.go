package probe

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/gprobes/gprobes/rpn"
)

// A module is bound to the build it was compiled for: its BuildID, when
// it has one, must be the build ID of the file, kernel or kernel module
// the target runs. A pack (package ppdf) may hold one compiled module for
// each of several builds; the target takes the one for its build, where
// the module is loaded (each process its own), and refuses the module
// where none is.

// BuildError is a module refused for the build the target runs.
type BuildError struct {
	Module string   // the module's name (the DPDF's name =)
	Where  string   // what runs it: a file's path, "the guest kernel", "kernel module rmd160"
	Have   []byte   // the build ID the target runs; nil when it has none or it could not be read
	Builds [][]byte // the builds the pack holds
}

func (e *BuildError) Error() string {
	have := hexID(e.Have)
	switch {
	case len(e.Builds) == 1:
		return fmt.Sprintf("%s has build ID %s, the pack was built for %s: rebuild the pack against this build of %s (gprobes build --symbols with its file), or insert the pack built for it", e.Where, have, hexID(e.Builds[0]), e.Module)
	case len(e.Have) == 0:
		return fmt.Sprintf("%s has no build ID gprobes could read, and the pack holds %d builds of %s (%s): without the ID it cannot tell which is this one", e.Where, len(e.Builds), e.Module, idList(e.Builds))
	}
	return fmt.Sprintf("%s has build ID %s, and the pack holds builds %s of %s, not this one: add this build to the pack (gprobes build --for with its symbols), or insert the pack built for it", e.Where, have, idList(e.Builds), e.Module)
}

func hexID(id []byte) string {
	if len(id) == 0 {
		return "none"
	}
	return hex.EncodeToString(id)
}

func idList(ids [][]byte) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = hexID(id)
	}
	return strings.Join(s, ", ")
}

// SelectBuild returns the build of a pack for a target that runs build
// have of the module (where names it for messages). A pack of one build
// is taken unless both it and the target have a build ID and they differ
// (a module built without symbols, or a file without a build ID, binds
// nothing: as before packs); of several builds, the one whose build ID is
// have, and none when have is unknown.
func SelectBuild(builds []*rpn.Module, have []byte, where string) (*rpn.Module, error) {
	if len(builds) == 1 {
		b := builds[0]
		if len(b.BuildID) == 0 || len(have) == 0 || bytes.Equal(b.BuildID, have) {
			return b, nil
		}
	} else if len(have) > 0 {
		for _, b := range builds {
			if bytes.Equal(b.BuildID, have) {
				return b, nil
			}
		}
	}
	e := &BuildError{Module: builds[0].Name, Where: where, Have: have}
	for _, b := range builds {
		e.Builds = append(e.Builds, b.BuildID)
	}
	return nil, e
}
