package symbols

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Sentinel errors. They are wrapped with the operation and the file
// ("open vmlinux: ...", "sizeof(struct foo): ..."); test with errors.Is.
var (
	// ErrUnknownFormat: Open was given something that is neither an ELF file
	// nor a System.map / kallsyms text file.
	ErrUnknownFormat = errors.New("not a symbol file: expected an ELF file, a System.map or a copy of /proc/kallsyms (lines \"ADDR TYPE NAME [module]\")")

	// ErrZeroAddresses: a kallsyms copy (or System.map) in which every
	// address is zero, which is what an unprivileged read of /proc/kallsyms
	// returns.
	ErrZeroAddresses = errors.New("every address is zero: the file was read without CAP_SYSLOG; copy /proc/kallsyms as root or lower kernel.kptr_restrict")

	// ErrNoSymbols: a System.map or kallsyms file without a single defined
	// symbol.
	ErrNoSymbols = errors.New("no symbol definitions: the file lists only undefined symbols; pass a System.map, a copy of /proc/kallsyms or the binary itself")

	// ErrStripped: an ELF file with no .symtab, no .dynsym, no DWARF and no
	// .BTF.
	ErrStripped = errors.New("no .symtab, .dynsym, DWARF or .BTF: the file is stripped; pass the unstripped binary or its separate debug file (/usr/lib/debug/.build-id/...)")

	// ErrNoDWARF: a source line, sizeof or offsetof was asked of a set in
	// which no file carries DWARF.
	ErrNoDWARF = errors.New("no DWARF debug information: pass a binary or vmlinux built with -g via --symbols")

	// ErrNoTypes: sizeof, offsetof or a field was asked of a set in which no
	// file carries DWARF or BTF. errors.Is(ErrNoTypes, ErrNoDWARF) holds.
	ErrNoTypes error = noTypesError{}

	// ErrNoCode: a source line at or after which the file has no code.
	ErrNoCode = errors.New("no code at or after this line")

	// ErrBitField: offsetof of a bit-field member.
	ErrBitField = errors.New("bit-field has no byte offset: read the containing word and mask it")

	// ErrIncompleteType: a struct, union or enum that every compile unit only
	// declares.
	ErrIncompleteType = errors.New("type is only declared, never defined: pass the file whose DWARF defines it")

	// ErrChanged: an ELF file changed on disk between Open and the first
	// DWARF query (its build ID or size differs).
	ErrChanged = errors.New("file changed on disk since it was opened: open it again")

	// ErrNotLinked: the symbol is defined only in a relocatable object
	// (a .o, a kernel module's .ko), which has no addresses until it is
	// loaded; a *NotFoundError wraps it. The compiler leaves such a
	// location symbolic, to be resolved when the module is inserted.
	ErrNotLinked = errors.New("defined in a relocatable object, which has no addresses until it is loaded")
)

// noTypesError is ErrNoTypes: it also matches ErrNoDWARF, which type
// queries returned before BTF was read.
type noTypesError struct{}

func (noTypesError) Error() string {
	return "no type information: pass a binary or vmlinux built with -g, or the kernel's BTF (/sys/kernel/btf/vmlinux, or a vmlinux with a .BTF section), via --symbols"
}

func (noTypesError) Is(target error) bool { return target == ErrNoDWARF }

// NotFoundError reports a name that no table defines, with close names that
// do exist.
type NotFoundError struct {
	What        string   // "symbol", "type", "field", "source file"
	Name        string   // what was asked for
	In          string   // for a field: the type searched, e.g. "struct task_struct"
	Sources     []string // the files searched (empty for a field)
	Suggestions []string // up to 3 close names, best first
	Hint        string   // extra advice, appended after a semicolon
	// NotLinked: the name is defined, in a relocatable object only
	// (Unwrap gives ErrNotLinked)
	NotLinked bool
}

// Unwrap is ErrNotLinked when the name is defined in a relocatable
// object only.
func (e *NotFoundError) Unwrap() error {
	if e.NotLinked {
		return ErrNotLinked
	}
	return nil
}

func (e *NotFoundError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %q not found", e.What, e.Name)
	switch {
	case e.In != "":
		b.WriteString(" in ")
		b.WriteString(e.In)
	case len(e.Sources) > 0:
		// each file once: a file read as two tables (the kernel's
		// kallsyms, its image and its modules) is one place searched
		b.WriteString(" in ")
		seen := map[string]bool{}
		for _, src := range e.Sources {
			if !seen[src] {
				if len(seen) > 0 {
					b.WriteString(", ")
				}
				seen[src] = true
				b.WriteString(src)
			}
		}
	default:
		b.WriteString(": no symbol file was given (pass --symbols FILE)")
	}
	if len(e.Suggestions) > 0 {
		b.WriteString(" (did you mean ")
		for i, s := range e.Suggestions {
			switch {
			case i == 0:
			case i == len(e.Suggestions)-1:
				b.WriteString(" or ")
			default:
				b.WriteString(", ")
			}
			b.WriteString(strconv.Quote(s))
		}
		b.WriteString("?)")
	}
	if e.Hint != "" {
		b.WriteString("; ")
		b.WriteString(e.Hint)
	}
	return b.String()
}

// Choice is one of the answers an AmbiguousError lists.
type Choice struct {
	Name   string // symbol name, enclosing function, or matching file path
	Addr   uint64 // 0 for a file choice
	Off    uint64 // for a line choice: Addr's offset from the function Name
	Kind   byte   // nm type letter of a symbol choice, 0 otherwise
	Module string // kallsyms module, "" for the main image
	Source string // the symbol file that gave this choice
	Line   int    // for a line choice: the line used
}

// AmbiguousError reports a name with several different answers. Choices are
// sorted by address (symbols, lines) or by path (files).
type AmbiguousError struct {
	What    string // "symbol", "source file", "line"
	Name    string
	Choices []Choice
}

// maxListed caps the choices spelled out in an AmbiguousError message.
const maxListed = 10

func (e *AmbiguousError) Error() string {
	var b strings.Builder
	switch e.What {
	case "source file":
		fmt.Fprintf(&b, "source file %q is ambiguous: it matches ", e.Name)
	case "line":
		fmt.Fprintf(&b, "line %s has code in %d functions (inlined or duplicated code): ", e.Name, len(e.Choices))
	default:
		fmt.Fprintf(&b, "%s %q is ambiguous: %d definitions at different addresses and not exactly one of them global: ", e.What, e.Name, len(e.Choices))
	}
	for i, c := range e.Choices {
		if i == maxListed {
			fmt.Fprintf(&b, ", and %d more", len(e.Choices)-maxListed)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		switch e.What {
		case "source file":
			b.WriteString(c.Name)
		case "line":
			fmt.Fprintf(&b, "%#x <%s+%#x>", c.Addr, c.Name, c.Off)
		default:
			fmt.Fprintf(&b, "%#x %c", c.Addr, c.Kind)
			if c.Module != "" {
				fmt.Fprintf(&b, " [%s]", c.Module)
			}
			if c.Source != "" {
				fmt.Fprintf(&b, " (%s)", c.Source)
			}
		}
	}
	switch e.What {
	case "source file":
		b.WriteString(": give more of the path")
	case "line":
		b.WriteString(": probe one of them as FUNCTION+OFFSET or by address")
	default:
		b.WriteString(": write the address instead")
	}
	return b.String()
}

// ParseError is a malformed line in a System.map or kallsyms file.
type ParseError struct {
	Path string
	Line int
	Msg  string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("%s:%d: %s", e.Path, e.Line, e.Msg)
}

// ErrorList is the malformed lines of one file, in line order. The parser
// stops collecting after maxErrors.
type ErrorList []*ParseError

// maxErrors is how many malformed lines are collected before the parser gives up.
const maxErrors = 10

func (l ErrorList) Error() string {
	switch len(l) {
	case 0:
		return "no errors"
	case 1:
		return l[0].Error()
	}
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap lets errors.As find each *ParseError.
func (l ErrorList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}
