package bpf

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// FieldKind is how push field,NAME pushes a tracepoint field (docs/language.md, tracepoint:
// integers by value, arrays and strings by address).
type FieldKind uint8

const (
	// FieldScalar: an integer of 1, 2, 4 or 8 bytes, pushed by value
	// (sign-extended when Signed).
	FieldScalar FieldKind = iota
	// FieldPointer: a pointer ("const char * filename"), pushed by value
	// like a scalar: the address it holds, for log str, push mrf ...
	FieldPointer
	// FieldArray: an array in the record ("char comm[16]"), or an inline
	// value of a size other than 1, 2, 4 or 8: its address in the record
	// is pushed (a kernel address).
	FieldArray
	// FieldDataLoc: "__data_loc char[] name", a u32 whose low 16 bits are
	// the data's offset from the record's start and high 16 its length:
	// the data's address (record + offset) is pushed.
	FieldDataLoc
	// FieldRelLoc: "__rel_loc char[] name", as FieldDataLoc with the
	// offset counted from the end of the field itself.
	FieldRelLoc
)

func (k FieldKind) String() string {
	switch k {
	case FieldScalar:
		return "scalar"
	case FieldPointer:
		return "pointer"
	case FieldArray:
		return "array"
	case FieldDataLoc:
		return "__data_loc"
	case FieldRelLoc:
		return "__rel_loc"
	}
	return "fieldkind(" + strconv.Itoa(int(k)) + ")"
}

// Field is one field of a tracepoint's record, as its format file gives
// it.
type Field struct {
	Name string
	// Type as written, less the name: "unsigned int", "const char *",
	// "char[16]", "__data_loc char[]".
	Type   string
	Offset int // bytes from the record's start
	Size   int // bytes in the record (4 for __data_loc and __rel_loc)
	Signed bool
	Kind   FieldKind
	// Common: one of the common_* fields every event's record starts
	// with (common_type, common_flags, common_preempt_count, common_pid).
	Common bool
}

// Format is a tracepoint's record layout, from tracefs's
// events/GROUP/EVENT/format (ReadFormat, ParseFormat).
type Format struct {
	Group, Event string
	ID           uint32 // the event's id (its common_type)
	Fields       []Field
}

// Name is "group:event".
func (f *Format) Name() string { return f.Group + ":" + f.Event }

// fieldLine matches "field:DECL;<tab>offset:N;<tab>size:N;<tab>signed:N;"
// (older kernels write "field special:DECL" for some).
var fieldLine = regexp.MustCompile(`^field(?: special)?:(.*);\s*offset:(\d+);\s*size:(\d+);\s*signed:(\d+);`)

// declName splits a field's declaration into its type, its name and its
// array suffix: "char prev_comm[16]" -> "char", "prev_comm", "[16]".
var declName = regexp.MustCompile(`^(.*?)\s*([A-Za-z_][A-Za-z0-9_]*)\s*(\[[^\]]*\])?$`)

// ParseFormat parses the text of a tracefs format file for the event
// group:event (the names are only for messages and the result).
func ParseFormat(group, event string, text []byte) (*Format, error) {
	f := &Format{Group: group, Event: event}
	bad := func(n int, format string, args ...any) error {
		return fmt.Errorf("tracepoint %s:%s: format line %d: %s", group, event, n, fmt.Sprintf(format, args...))
	}
	haveID, inFormat := false, false
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "":
			continue
		case strings.HasPrefix(l, "ID:"):
			id, err := strconv.ParseUint(strings.TrimSpace(l[3:]), 10, 32)
			if err != nil {
				return nil, bad(n, "bad ID %q", l[3:])
			}
			f.ID, haveID = uint32(id), true
		case l == "format:":
			inFormat = true
		case strings.HasPrefix(l, "print fmt:"):
			inFormat = false
		case inFormat && strings.HasPrefix(l, "field"):
			m := fieldLine.FindStringSubmatch(l)
			if m == nil {
				return nil, bad(n, "cannot read %q", l)
			}
			fd, err := parseField(m)
			if err != nil {
				return nil, bad(n, "%v", err)
			}
			if seen[fd.Name] {
				return nil, bad(n, "field %s twice", fd.Name)
			}
			seen[fd.Name] = true
			f.Fields = append(f.Fields, fd)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tracepoint %s:%s: format: %w", group, event, err)
	}
	if !haveID {
		return nil, fmt.Errorf("tracepoint %s:%s: format has no ID line", group, event)
	}
	if len(f.Fields) == 0 {
		return nil, fmt.Errorf("tracepoint %s:%s: format has no fields", group, event)
	}
	return f, nil
}

func parseField(m []string) (Field, error) {
	decl := strings.TrimSpace(m[1])
	off, err1 := strconv.Atoi(m[2])
	size, err2 := strconv.Atoi(m[3])
	if err1 != nil || err2 != nil || off < 0 || size < 0 || off > 1<<16 || size > 1<<16 {
		return Field{}, fmt.Errorf("bad offset or size in %q", m[0])
	}
	d := declName.FindStringSubmatch(decl)
	if d == nil || d[2] == "" {
		return Field{}, fmt.Errorf("no field name in %q", decl)
	}
	typ, name, arr := d[1], d[2], d[3]
	fd := Field{Name: name, Type: typ + arr, Offset: off, Size: size, Signed: m[4] == "1", Common: strings.HasPrefix(name, "common_")}
	switch {
	case strings.HasPrefix(typ, "__data_loc"), strings.HasPrefix(typ, "__rel_loc"):
		fd.Kind = FieldDataLoc
		if strings.HasPrefix(typ, "__rel_loc") {
			fd.Kind = FieldRelLoc
		}
		if size != 4 {
			return Field{}, fmt.Errorf("%s %s: size %d, not 4", typ, name, size)
		}
	case arr != "":
		fd.Kind = FieldArray
	case strings.HasSuffix(typ, "*") && (size == 4 || size == 8):
		fd.Kind = FieldPointer
	case size == 1 || size == 2 || size == 4 || size == 8:
		fd.Kind = FieldScalar
	default:
		fd.Kind = FieldArray // an inline struct or a wider value: its address
	}
	return fd, nil
}

// Field returns the field named name, or an error naming the event and
// listing its fields (the event's own first, then the common ones), with
// the closest names when there are some.
func (f *Format) Field(name string) (*Field, error) {
	for i := range f.Fields {
		if f.Fields[i].Name == name {
			return &f.Fields[i], nil
		}
	}
	var own, common []string
	for _, fd := range f.Fields {
		if fd.Common {
			common = append(common, fd.Name)
		} else {
			own = append(own, fd.Name)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "tracepoint %s has no field %q", f.Name(), name)
	if c := closest(name, append(append([]string{}, own...), common...)); len(c) > 0 {
		fmt.Fprintf(&b, " (did you mean %s?)", strings.Join(c, " or "))
	}
	if len(own) > 0 {
		fmt.Fprintf(&b, "; its fields: %s", strings.Join(own, ", "))
	} else {
		b.WriteString("; it has no fields of its own")
	}
	if len(common) > 0 {
		fmt.Fprintf(&b, " (and %s)", strings.Join(common, ", "))
	}
	return nil, fmt.Errorf("%s", b.String())
}

// FieldNames lists the event's fields, its own first, then the common
// ones.
func (f *Format) FieldNames() []string {
	var own, common []string
	for _, fd := range f.Fields {
		if fd.Common {
			common = append(common, fd.Name)
		} else {
			own = append(own, fd.Name)
		}
	}
	return append(own, common...)
}

// closest returns the names at the smallest edit distance from name, when
// that distance is small for the name's length (at most 3 of them).
func closest(name string, names []string) []string {
	limit := 1 + len(name)/4
	best := limit + 1
	var out []string
	for _, n := range names {
		d := editDistance(strings.ToLower(name), strings.ToLower(n))
		if strings.Contains(n, name) && len(name) >= 3 {
			d = min(d, limit)
		}
		switch {
		case d < best:
			best, out = d, []string{n}
		case d == best:
			out = append(out, n)
		}
	}
	if best > limit {
		return nil
	}
	sort.Strings(out)
	if len(out) > 3 {
		out = out[:3]
	}
	return out
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
