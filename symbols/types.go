package symbols

import (
	"debug/dwarf"
	"errors"
	"fmt"
	"strings"
)

// Types are found through an index from type name to the entries that
// define it, built one compile unit at a time: a lookup indexes the top-level
// entries of the next unit (skipping every subtree through DW_AT_sibling)
// until the name has a complete definition. C headers repeat the same types
// in every unit, so a common type is found in the first units and most of a
// large vmlinux is never decoded. A name that no unit defines (a typo) costs
// a walk over every unit once; after that the index is complete.
//
// Only the entries on the path a query asks about are decoded: the struct,
// its members, the types of the members the field path goes through.

// typeIndex is the per-file state of type lookups. The Table's mutex guards it.
type typeIndex struct {
	names   map[string][]typeRef // "struct foo", "unsigned long", "pid_t" -> entries
	scanned int                  // units indexed so far
	sizes   map[string]uint64
	offsets map[string]layout // by type key and field path
	members map[dwarf.Offset][]member
}

type typeRef struct {
	off  dwarf.Offset
	decl bool // DW_AT_declaration: incomplete type
}

// member is a DW_TAG_member of a struct, union or class.
type member struct {
	name    string
	typ     dwarf.Offset
	hasType bool
	loc     uint64 // DW_AT_data_member_location; 0 for union members
	bitSize int64  // DW_AT_bit_size; 0 for an ordinary member
}

// die is the part of a type entry the layout code uses.
type die struct {
	off      dwarf.Offset
	tag      dwarf.Tag
	name     string
	size     int64
	hasSize  bool
	typ      dwarf.Offset
	hasType  bool
	decl     bool
	children bool
	addrSize int
}

// layout is the answer to a type query: the offset of a field path (0 for
// the type itself) and the size of the type there. sizeErr says why a type
// has no size (a flexible array member, a function type); Offsetof ignores
// it.
type layout struct {
	off     uint64
	size    uint64
	sizeErr error
}

// Sizeof returns the size in bytes of a type, from DWARF or BTF. typeName is
// normalized C: "struct task_struct", "union foo", "enum bar", "int",
// "unsigned long", "pid_t" (a typedef), optionally followed by " *" (a
// pointer: the address size). Typedefs and const/volatile are followed. The
// first complete definition found wins: C lets two files define different
// types of one name, and this is not checked.
//
// Each file answers from its DWARF when it has a .debug_info section, and
// from its BTF otherwise (a raw BTF file such as /sys/kernel/btf/vmlinux, or
// an ELF file's .BTF section). The files are searched in the order they were
// added.
func (s *Set) Sizeof(typeName string) (uint64, error) {
	l, err := s.layoutOf(typeName, "", false)
	if err != nil {
		return 0, fmt.Errorf("sizeof(%s): %w", typeName, err)
	}
	return l.size, nil
}

// Offsetof returns the byte offset of fieldPath in typeName: "pid", "a.b",
// "arr[3]", "a.b[2].c". Array indexes count elements. Members of anonymous
// structs and unions are found as if they were members of the enclosing
// type. A bit-field is an error wrapping ErrBitField.
func (s *Set) Offsetof(typeName, fieldPath string) (uint64, error) {
	l, err := s.layoutOf(typeName, fieldPath, true)
	if err != nil {
		return 0, fmt.Errorf("offsetof(%s, %s): %w", typeName, fieldPath, err)
	}
	return l.off, nil
}

// Field returns the byte offset of fieldPath in typeName, as Offsetof, and
// the size of the field's type, as Sizeof would give it: the width a probe
// reads. A field whose type has no size (a flexible array member such as
// char tail[] in DWARF, a function type) is an error; Offsetof still
// answers for it. In BTF, which cannot tell char tail[] from char tail[0],
// such a member has size 0.
func (s *Set) Field(typeName, fieldPath string) (offset, size uint64, err error) {
	l, err := s.layoutOf(typeName, fieldPath, true)
	if err == nil && l.sizeErr != nil {
		err = fmt.Errorf("size of field %s: %w", strings.TrimSpace(fieldPath), l.sizeErr)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("field(%s, %s): %w", typeName, fieldPath, err)
	}
	return l.off, l.size, nil
}

// layoutOf answers Sizeof (field false) and Offsetof and Field.
func (s *Set) layoutOf(typeName, fieldPath string, field bool) (layout, error) {
	tn, err := parseTypeName(typeName)
	if err != nil {
		return layout{}, err
	}
	var steps []step
	if field {
		if steps, err = parseFieldPath(fieldPath); err != nil {
			return layout{}, err
		}
	}
	tables := s.typeTables()
	if len(tables) == 0 {
		return layout{}, ErrNoTypes
	}
	if tn.ptr > 0 {
		if field {
			return layout{}, fmt.Errorf("%s is a pointer: offsetof needs a struct or union", strings.TrimSpace(typeName))
		}
		return layout{size: uint64(tables[0].ptrSize)}, nil
	}
	cacheKey := tn.key + "\x00" + pathString(steps)
	var declared []string
	for _, t := range tables {
		var (
			l           layout
			found, decl bool
		)
		if t.hasDWARF {
			l, found, decl, err = t.dwarfLayout(tn, steps, cacheKey)
		} else {
			l, found, decl, err = t.btfLayout(tn, steps, cacheKey)
		}
		if err != nil || found {
			return l, err
		}
		if decl {
			declared = append(declared, t.path)
		}
	}
	if len(declared) > 0 {
		return layout{}, fmt.Errorf("%s is declared in %s but defined nowhere: %w", tn.key, strings.Join(declared, ", "), ErrIncompleteType)
	}
	return layout{}, s.typeNotFound(tables, tn)
}

// typeNotFound is the error for a type no table defines, with close names.
func (s *Set) typeNotFound(tables []*Table, tn typeName) error {
	e := &NotFoundError{What: "type", Name: tn.key, Sources: dwarfSources(tables)}
	sg := newSuggester(tn.key, false)
	for _, t := range tables {
		if !t.hasDWARF {
			t.btfNames(sg)
			continue
		}
		t.mu.Lock()
		if t.dw != nil {
			for k := range t.dw.types.names {
				sg.add(k)
			}
		}
		t.mu.Unlock()
	}
	e.Suggestions = sg.names()
	var hints []string
	for _, t := range tables {
		t.mu.Lock()
		if t.dw != nil && t.dw.typeUnits {
			hints = append(hints, t.path+" keeps types in .debug_types, which gprobes does not search: rebuild it without -fdebug-types-section")
		}
		if t.dw != nil && t.dw.splitDWARF {
			hints = append(hints, t.path+" keeps its types in .dwo files (-gsplit-dwarf), which gprobes does not read: rebuild it without -gsplit-dwarf")
		}
		t.mu.Unlock()
	}
	e.Hint = strings.Join(hints, "; ")
	return e
}

// typeTables returns the tables of s that can answer type queries: those
// with DWARF or BTF.
func (s *Set) typeTables() []*Table {
	var ts []*Table
	for _, t := range s.tables {
		if t.hasDWARF || t.hasBTF {
			ts = append(ts, t)
		}
	}
	return ts
}

// dwarfLayout answers a type query from t's DWARF.
func (t *Table) dwarfLayout(tn typeName, steps []step, cacheKey string) (l layout, found, declared bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	dw, err := t.loadDWARF()
	if err != nil {
		return l, false, false, err
	}
	dw.initTypes()
	if len(steps) == 0 {
		if v, ok := dw.types.sizes[tn.key]; ok {
			return layout{size: v}, true, true, nil
		}
	} else if l, ok := dw.types.offsets[cacheKey]; ok {
		return l, true, true, nil
	}
	off, found, declared, err := dw.findType(tn.key)
	if err != nil || !found {
		return l, false, declared, err
	}
	def, err := dw.resolve(off)
	if err != nil {
		return l, true, true, err
	}
	if len(steps) == 0 {
		v, err := dw.sizeOf(def)
		if err == nil {
			dw.types.sizes[tn.key] = v
		}
		return layout{size: v}, true, true, err
	}
	l, err = dw.offsetOf(def, tn.key, steps)
	if err == nil {
		dw.types.offsets[cacheKey] = l
	}
	return l, true, true, err
}

func (dw *dwarfInfo) initTypes() {
	if dw.types.names != nil {
		return
	}
	dw.types = typeIndex{
		names:   map[string][]typeRef{},
		sizes:   map[string]uint64{},
		offsets: map[string]layout{},
		members: map[dwarf.Offset][]member{},
	}
}

// findType returns the first complete definition of key, indexing units
// until one appears. declared reports that only declarations were found.
func (dw *dwarfInfo) findType(key string) (off dwarf.Offset, found, declared bool, err error) {
	ti := &dw.types
	check := func() (dwarf.Offset, bool) {
		for _, r := range ti.names[key] {
			if !r.decl {
				return r.off, true
			}
		}
		return 0, false
	}
	if off, ok := check(); ok {
		return off, true, true, nil
	}
	for ti.scanned < len(dw.units) {
		u := dw.units[ti.scanned]
		if err := dw.indexUnit(u); err != nil {
			return 0, false, false, err
		}
		ti.scanned++
		if off, ok := check(); ok {
			return off, true, true, nil
		}
	}
	return 0, false, len(ti.names[key]) > 0, nil
}

// indexUnit adds the named types at the top level of unit u to the index.
func (dw *dwarfInfo) indexUnit(u *unitInfo) error {
	r := dw.reader
	r.Seek(u.off)
	cu, err := r.Next()
	if err != nil {
		return fmt.Errorf("read unit %s: %w", u.name, err)
	}
	if cu == nil || !cu.Children {
		return nil
	}
	for {
		e, err := r.Next()
		if err != nil {
			return fmt.Errorf("read unit %s: %w", u.name, err)
		}
		if e == nil || e.Tag == 0 {
			return nil
		}
		if name, ok := e.Val(dwarf.AttrName).(string); ok && name != "" {
			if key := typeKey(e.Tag, name); key != "" {
				decl, _ := e.Val(dwarf.AttrDeclaration).(bool)
				dw.types.names[key] = append(dw.types.names[key], typeRef{off: e.Offset, decl: decl})
			}
		}
		if e.Children {
			r.SkipChildren()
		}
	}
}

// typeKey is the index key of a named type entry, "" for other entries.
func typeKey(tag dwarf.Tag, name string) string {
	switch tag {
	case dwarf.TagStructType, dwarf.TagUnionType, dwarf.TagEnumerationType, dwarf.TagClassType:
		return tagKeyword(tag) + " " + name
	case dwarf.TagTypedef:
		return name
	case dwarf.TagBaseType:
		return canonBase(strings.Fields(name))
	}
	return ""
}

func tagKeyword(tag dwarf.Tag) string {
	switch tag {
	case dwarf.TagStructType:
		return "struct"
	case dwarf.TagUnionType:
		return "union"
	case dwarf.TagEnumerationType:
		return "enum"
	case dwarf.TagClassType:
		return "class"
	}
	return strings.TrimPrefix(tag.String(), "Tag")
}

// readDIE decodes the entry at off; the shared reader is left at its first
// child.
func (dw *dwarfInfo) readDIE(off dwarf.Offset) (die, error) {
	r := dw.reader
	r.Seek(off)
	e, err := r.Next()
	if err != nil {
		return die{}, fmt.Errorf("read type entry at %#x: %w", off, err)
	}
	if e == nil {
		return die{}, fmt.Errorf("read type entry at %#x: no entry there", off)
	}
	d := die{off: off, tag: e.Tag, children: e.Children, addrSize: r.AddressSize()}
	d.name, _ = e.Val(dwarf.AttrName).(string)
	d.size, d.hasSize = e.Val(dwarf.AttrByteSize).(int64)
	d.typ, d.hasType = e.Val(dwarf.AttrType).(dwarf.Offset)
	d.decl, _ = e.Val(dwarf.AttrDeclaration).(bool)
	return d, nil
}

// maxChain bounds typedef/qualifier chains and anonymous-member nesting, so
// that a cyclic or hostile file cannot loop.
const maxChain = 64

// resolve follows typedefs and qualifiers from off to the type they name, and
// from a declaration to a complete definition of the same name elsewhere.
// A typedef or qualifier of void comes back as itself, with hasType false.
func (dw *dwarfInfo) resolve(off dwarf.Offset) (die, error) {
	for range maxChain {
		d, err := dw.readDIE(off)
		if err != nil {
			return d, err
		}
		switch d.tag {
		case dwarf.TagTypedef, dwarf.TagConstType, dwarf.TagVolatileType, dwarf.TagRestrictType,
			dwarf.TagAtomicType, dwarf.TagSharedType, dwarf.TagImmutableType:
			if !d.hasType {
				return d, nil
			}
			off = d.typ
			continue
		case dwarf.TagStructType, dwarf.TagUnionType, dwarf.TagClassType, dwarf.TagEnumerationType:
			if !d.decl {
				return d, nil
			}
			if d.name == "" {
				return d, fmt.Errorf("anonymous %s at %#x: %w", tagKeyword(d.tag), d.off, ErrIncompleteType)
			}
			key := tagKeyword(d.tag) + " " + d.name
			def, found, _, err := dw.findType(key)
			if err != nil {
				return d, err
			}
			if !found {
				return d, fmt.Errorf("%s: %w", key, ErrIncompleteType)
			}
			return dw.readDIE(def)
		}
		return d, nil
	}
	return die{}, fmt.Errorf("type at %#x: typedef chain longer than %d", off, maxChain)
}

// describe names a resolved type for an error message.
func describe(d die) string {
	switch d.tag {
	case dwarf.TagStructType, dwarf.TagUnionType, dwarf.TagClassType, dwarf.TagEnumerationType:
		if d.name == "" {
			return "an anonymous " + tagKeyword(d.tag)
		}
		return tagKeyword(d.tag) + " " + d.name
	case dwarf.TagPointerType:
		return "a pointer"
	case dwarf.TagArrayType:
		return "an array"
	case dwarf.TagSubroutineType:
		return "a function type"
	case dwarf.TagTypedef, dwarf.TagConstType, dwarf.TagVolatileType:
		return "void"
	case dwarf.TagBaseType:
		return d.name
	}
	return strings.TrimPrefix(d.tag.String(), "Tag")
}

// sizeOf is the size in bytes of the resolved type d.
func (dw *dwarfInfo) sizeOf(d die) (uint64, error) {
	for range maxChain {
		switch d.tag {
		case dwarf.TagPointerType, dwarf.TagReferenceType, dwarf.TagRvalueReferenceType, dwarf.TagPtrToMemberType:
			if d.hasSize {
				return uint64(d.size), nil
			}
			if d.addrSize > 0 {
				return uint64(d.addrSize), nil
			}
			return uint64(dw.ptrSize), nil
		case dwarf.TagArrayType:
			if d.hasSize {
				return uint64(d.size), nil
			}
			dims, elem, err := dw.arrayDims(d)
			if err != nil {
				return 0, err
			}
			n := uint64(1)
			for _, c := range dims {
				if c < 0 {
					return 0, errors.New("an array of unknown length has no size")
				}
				n *= uint64(c)
			}
			ed, err := dw.resolve(elem)
			if err != nil {
				return 0, err
			}
			es, err := dw.sizeOf(ed)
			return n * es, err
		case dwarf.TagSubroutineType:
			return 0, errors.New("a function type has no size")
		case dwarf.TagTypedef, dwarf.TagConstType, dwarf.TagVolatileType, dwarf.TagUnspecifiedType:
			return 0, fmt.Errorf("%s has no size", describe(d))
		}
		if d.hasSize {
			return uint64(d.size), nil
		}
		if d.tag == dwarf.TagEnumerationType && d.hasType {
			var err error
			if d, err = dw.resolve(d.typ); err != nil {
				return 0, err
			}
			continue
		}
		return 0, fmt.Errorf("%s at %#x has no DW_AT_byte_size", describe(d), d.off)
	}
	return 0, fmt.Errorf("type at %#x: chain longer than %d", d.off, maxChain)
}

// arrayDims reads the dimensions of an array type (-1: unknown, as in a
// flexible array member) and its element type.
func (dw *dwarfInfo) arrayDims(d die) ([]int64, dwarf.Offset, error) {
	if !d.hasType {
		return nil, 0, fmt.Errorf("array at %#x has no element type", d.off)
	}
	if _, err := dw.readDIE(d.off); err != nil {
		return nil, 0, err
	}
	var dims []int64
	r := dw.reader
	for d.children {
		e, err := r.Next()
		if err != nil {
			return nil, 0, fmt.Errorf("read array at %#x: %w", d.off, err)
		}
		if e == nil || e.Tag == 0 {
			break
		}
		if e.Tag == dwarf.TagSubrangeType {
			n := int64(-1)
			if c, ok := e.Val(dwarf.AttrCount).(int64); ok {
				n = c
			} else if ub, ok := e.Val(dwarf.AttrUpperBound).(int64); ok {
				lb, _ := e.Val(dwarf.AttrLowerBound).(int64)
				n = ub - lb + 1
			}
			if n < -1 {
				n = -1
			}
			dims = append(dims, n)
		}
		if e.Children {
			r.SkipChildren()
		}
	}
	if len(dims) == 0 {
		dims = []int64{-1}
	}
	return dims, d.typ, nil
}

// members returns the members of a struct, union or class, cached.
func (dw *dwarfInfo) members(d die) ([]member, error) {
	if ms, ok := dw.types.members[d.off]; ok {
		return ms, nil
	}
	if _, err := dw.readDIE(d.off); err != nil {
		return nil, err
	}
	ms := []member{}
	r := dw.reader
	for d.children {
		e, err := r.Next()
		if err != nil {
			return nil, fmt.Errorf("read members of %s: %w", describe(d), err)
		}
		if e == nil || e.Tag == 0 {
			break
		}
		if e.Tag == dwarf.TagMember {
			m := member{}
			m.name, _ = e.Val(dwarf.AttrName).(string)
			m.typ, m.hasType = e.Val(dwarf.AttrType).(dwarf.Offset)
			m.bitSize, _ = e.Val(dwarf.AttrBitSize).(int64)
			switch v := e.Val(dwarf.AttrDataMemberLoc).(type) {
			case int64:
				m.loc = uint64(v)
			case []byte:
				loc, ok := memberLocExpr(v)
				if !ok {
					return nil, fmt.Errorf("member %q of %s: unsupported location expression % x", m.name, describe(d), v)
				}
				m.loc = loc
			}
			ms = append(ms, m)
		}
		if e.Children {
			r.SkipChildren()
		}
	}
	dw.types.members[d.off] = ms
	return ms, nil
}

// memberLocExpr decodes the DWARF 2 form of a member location:
// DW_OP_plus_uconst N (or DW_OP_constu N).
func memberLocExpr(b []byte) (uint64, bool) {
	if len(b) < 2 || (b[0] != 0x23 && b[0] != 0x10) {
		return 0, false
	}
	var v uint64
	var shift uint
	for i, c := range b[1:] {
		if shift > 63 {
			return 0, false
		}
		v |= uint64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			return v, i+2 == len(b)
		}
	}
	return 0, false
}

// findMember looks name up among the members of d, then inside its
// anonymous struct and union members; loc is the offset from d. visited
// holds the types searched already in vain: a hostile file whose anonymous
// members repeat types costs one visit each.
func (dw *dwarfInfo) findMember(d die, name string, depth int, visited map[dwarf.Offset]bool) (m member, loc uint64, ok bool, err error) {
	if depth > maxChain {
		return m, 0, false, fmt.Errorf("anonymous members of %s nest deeper than %d", describe(d), maxChain)
	}
	if visited[d.off] {
		return m, 0, false, nil
	}
	visited[d.off] = true
	ms, err := dw.members(d)
	if err != nil {
		return m, 0, false, err
	}
	for _, m := range ms {
		if m.name == name {
			return m, m.loc, true, nil
		}
	}
	for _, am := range ms {
		if am.name != "" || !am.hasType {
			continue
		}
		sub, err := dw.resolve(am.typ)
		if err != nil {
			return m, 0, false, err
		}
		if !isAggregate(sub.tag) {
			continue
		}
		if m, loc, ok, err := dw.findMember(sub, name, depth+1, visited); ok || err != nil {
			return m, am.loc + loc, ok, err
		}
	}
	return m, 0, false, nil
}

// fieldNames lists the member names visible in d, through anonymous members.
func (dw *dwarfInfo) fieldNames(d die, visited map[dwarf.Offset]bool, out []string) []string {
	ms, err := dw.members(d)
	if err != nil || visited[d.off] {
		return out
	}
	visited[d.off] = true
	for _, m := range ms {
		if m.name != "" {
			out = append(out, m.name)
			continue
		}
		if m.hasType {
			if sub, err := dw.resolve(m.typ); err == nil && isAggregate(sub.tag) {
				out = dw.fieldNames(sub, visited, out)
			}
		}
	}
	return out
}

func isAggregate(tag dwarf.Tag) bool {
	return tag == dwarf.TagStructType || tag == dwarf.TagUnionType || tag == dwarf.TagClassType
}

// offsetOf walks steps from the resolved type d.
func (dw *dwarfInfo) offsetOf(d die, typeKey string, steps []step) (layout, error) {
	var (
		off     uint64
		dims    []int64 // remaining dimensions while inside an array
		elem    dwarf.Offset
		inArray bool
		rowSize uint64 // size of the element the last index selected
		cur     = d
	)
	for k, st := range steps {
		here := pathString(steps[:k])
		if st.isIdx {
			if !inArray {
				if cur.tag != dwarf.TagArrayType {
					return layout{}, fmt.Errorf("%s is %s, not an array: it cannot be indexed", here, describe(cur))
				}
				var err error
				if dims, elem, err = dw.arrayDims(cur); err != nil {
					return layout{}, err
				}
				inArray = true
			}
			if n := dims[0]; n > 0 && st.index >= uint64(n) {
				return layout{}, fmt.Errorf("index %d out of range: %s has %d elements", st.index, here, n)
			}
			ed, err := dw.resolve(elem)
			if err != nil {
				return layout{}, err
			}
			stride, err := dw.sizeOf(ed)
			if err != nil {
				return layout{}, fmt.Errorf("element of %s: %w", here, err)
			}
			for _, c := range dims[1:] {
				if c < 0 {
					return layout{}, fmt.Errorf("%s: an inner dimension of unknown length", here)
				}
				stride *= uint64(c)
			}
			off += st.index * stride
			rowSize = stride
			dims = dims[1:]
			if len(dims) == 0 {
				cur, inArray = ed, false
			}
			continue
		}
		if inArray || cur.tag == dwarf.TagArrayType {
			return layout{}, fmt.Errorf("%s is an array: index it before selecting .%s", here, st.name)
		}
		if !isAggregate(cur.tag) {
			what := here
			if k == 0 {
				what = typeKey
			}
			return layout{}, fmt.Errorf("%s is %s, not a struct or union: it has no member %q", what, describe(cur), st.name)
		}
		m, loc, ok, err := dw.findMember(cur, st.name, 0, map[dwarf.Offset]bool{})
		if err != nil {
			return layout{}, err
		}
		if !ok {
			in := describe(cur)
			if k > 0 && cur.name == "" {
				in = typeKey + " member " + here
			} else if k == 0 {
				in = typeKey
			}
			sg := newSuggester(st.name, true)
			for _, n := range dw.fieldNames(cur, map[dwarf.Offset]bool{}, nil) {
				sg.add(n)
			}
			return layout{}, &NotFoundError{What: "field", Name: st.name, In: in, Suggestions: sg.names()}
		}
		if m.bitSize > 0 {
			return layout{}, fmt.Errorf("field %s is %d bits wide: %w", pathString(steps[:k+1]), m.bitSize, ErrBitField)
		}
		off += loc
		if !m.hasType {
			return layout{}, fmt.Errorf("member %s has no type", pathString(steps[:k+1]))
		}
		if cur, err = dw.resolve(m.typ); err != nil {
			return layout{}, err
		}
	}
	l := layout{off: off}
	if inArray {
		// grid[1] of an int grid[2][3]: a row, the last stride.
		l.size = rowSize
		return l, nil
	}
	l.size, l.sizeErr = dw.sizeOf(cur)
	return l, nil
}
