package ppdf

import (
	"errors"
	"fmt"
)

// Errors returned by Decode, Encode, ReadFile and WriteFile. Test for them
// with errors.Is; the messages of the wrapped errors carry the details (which
// field, which index, how many bytes) and say how to fix the problem.
var (
	// ErrNotPPDF: the data does not start with the PPDF magic. The message
	// says when the data looks like a DPDF source file or like a PPDF whose
	// header a text-mode transfer mangled.
	ErrNotPPDF = errors.New("not a PPDF file")

	// ErrVersion: the file has another format version. Returned as a
	// *VersionError, which carries both versions.
	ErrVersion = errors.New("unsupported PPDF version")

	// ErrTruncated: the data ends before something it announces. Returned
	// as a *TruncatedError, which says what and how many bytes.
	ErrTruncated = errors.New("truncated")

	// ErrChecksum: the SHA-256 at the end does not match the bytes before it.
	ErrChecksum = errors.New("checksum mismatch: the file is corrupt or was modified")

	// ErrTrailing: there are bytes after the checksum.
	ErrTrailing = errors.New("trailing data after the checksum")

	// ErrInvalid: the bytes are well formed but describe a module that
	// cannot exist: an enum or header value out of range, an offset past the
	// code, an index past the file table, an unsorted table, a section out of
	// order. Decode returns it for a crafted file (the checksum matched);
	// Encode returns it for a Module it would refuse to read back.
	ErrInvalid = errors.New("invalid module")

	// ErrSeveralBuilds: Decode was given a pack of several builds (a
	// version 5 file); DecodePack reads it.
	ErrSeveralBuilds = errors.New("a pack of several builds")

	// ErrLimit: a string, table or the whole file is larger than the format
	// allows (see the Max constants). Encode refuses rather than truncate.
	ErrLimit = errors.New("exceeds a PPDF limit")
)

// VersionError reports a PPDF whose format version this gprobes does not
// read. errors.Is(err, ErrVersion) is true for it.
type VersionError struct {
	Got    uint16 // version in the file
	Want   uint16 // newest version this package reads (Version)
	Oldest uint16 // oldest version it reads (MinVersion); 0 means Want
}

func (e *VersionError) Error() string {
	reads := fmt.Sprintf("%d", e.Want)
	if e.Oldest != 0 && e.Oldest < e.Want {
		reads = fmt.Sprintf("%d to %d", e.Oldest, e.Want)
	}
	if e.Got > e.Want {
		return fmt.Sprintf("PPDF version %d is newer than this gprobes reads (%s): upgrade gprobes or rebuild the PPDF", e.Got, reads)
	}
	return fmt.Sprintf("PPDF version %d is older than this gprobes reads (%s): rebuild it from its DPDF with gprobes build", e.Got, reads)
}

// Is makes errors.Is(err, ErrVersion) true.
func (e *VersionError) Is(target error) bool { return target == ErrVersion }

// TruncatedError reports data that ends before something it announces: the
// magic, a section, a string, or a table whose count promises more entries
// than there are bytes. errors.Is(err, ErrTruncated) is true for it.
type TruncatedError struct {
	What string // what was being read: "probe 2 location text", "the file"
	Need uint64 // bytes it needs (at least)
	Left uint64 // bytes there are
}

func (e *TruncatedError) Error() string {
	return fmt.Sprintf("truncated: %s needs %d bytes, %d left", e.What, e.Need, e.Left)
}

// Is makes errors.Is(err, ErrTruncated) true.
func (e *TruncatedError) Is(target error) bool { return target == ErrTruncated }

// fault is an error whose message is all detail and whose class is one of
// the sentinels above: "probe 2: entry 40 is past end 20" is ErrInvalid.
type fault struct {
	kind error
	msg  string
}

func (e *fault) Error() string { return e.msg }
func (e *fault) Unwrap() error { return e.kind }

func invalidf(format string, args ...any) error {
	return &fault{ErrInvalid, fmt.Sprintf(format, args...)}
}

func limitf(format string, args ...any) error {
	return &fault{ErrLimit, fmt.Sprintf(format, args...)}
}
