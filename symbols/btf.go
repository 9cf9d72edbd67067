package symbols

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/cilium/ebpf/btf"
)

// BTF (BPF Type Format) is the compact type information a kernel built with
// CONFIG_DEBUG_INFO_BTF carries: /sys/kernel/btf/vmlinux, or the .BTF
// section of its vmlinux. It gives struct layouts without the kernel's debug
// package. The file is recognised by Open and its header checked; the types
// are parsed by github.com/cilium/ebpf/btf on the first type query, and the
// parsed Spec is kept in the Table. cilium's decoder indexes every type by
// name when it loads and decodes ("inflates") a type, and the types it
// refers to, only when a lookup reaches it.

// btfMagic is the first field of a BTF header, in the file's byte order.
const btfMagic = 0xeb9f

// btfHeaderLen is the size of struct btf_header (version 1).
const btfHeaderLen = 24

// btfHeader is struct btf_header of the kernel's include/uapi/linux/btf.h.
type btfHeader struct {
	Magic     uint16
	Version   uint8
	Flags     uint8
	HdrLen    uint32
	TypeOff   uint32
	TypeLen   uint32
	StringOff uint32
	StringLen uint32
}

// isBTF reports whether b starts with a BTF magic number in either byte
// order.
func isBTF(b []byte) bool {
	return len(b) >= 2 && (binary.LittleEndian.Uint16(b) == btfMagic || binary.BigEndian.Uint16(b) == btfMagic)
}

// checkBTFHeader validates the header of a BTF blob of the given size: magic,
// version 1, and type and string sections inside the blob. The types
// themselves are checked by cilium's parser on the first query.
func checkBTFHeader(b []byte, size int64) error {
	if len(b) < btfHeaderLen {
		return fmt.Errorf("BTF header: %d bytes, want at least %d", len(b), btfHeaderLen)
	}
	var bo binary.ByteOrder = binary.LittleEndian
	if binary.LittleEndian.Uint16(b) != btfMagic {
		bo = binary.BigEndian
	}
	var h btfHeader
	if _, err := binary.Decode(b, bo, &h); err != nil {
		return fmt.Errorf("BTF header: %w", err)
	}
	if h.Magic != btfMagic {
		return errors.New("BTF header: bad magic")
	}
	if h.Version != 1 {
		return fmt.Errorf("BTF header: version %d, want 1", h.Version)
	}
	if h.HdrLen < btfHeaderLen {
		return fmt.Errorf("BTF header: header length %d, want at least %d", h.HdrLen, btfHeaderLen)
	}
	end := func(off, n uint32) int64 { return int64(h.HdrLen) + int64(off) + int64(n) }
	if end(h.TypeOff, h.TypeLen) > size || end(h.StringOff, h.StringLen) > size {
		return fmt.Errorf("BTF header: type section [%d, +%d) or string section [%d, +%d) after the %d-byte header runs past the end (%d bytes)",
			h.TypeOff, h.TypeLen, h.StringOff, h.StringLen, h.HdrLen, size)
	}
	return nil
}

// openBTF makes the Table of a raw BTF file (what /sys/kernel/btf/vmlinux
// holds): types only, no symbols.
func openBTF(path string, f *os.File, head []byte) (*Table, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := checkBTFHeader(head, st.Size()); err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	t := newTable(path, FormatBTF, 0)
	t.fileSize = st.Size()
	t.ptrSize = 8
	t.hasBTF = true
	t.btfOff, t.btfLen = 0, st.Size()
	return t, nil
}

// elfBTF records the .BTF section of an ELF file in t, after checking its
// header.
func elfBTF(t *Table, ef *elf.File) error {
	s := ef.Section(".BTF")
	if s == nil || s.Type == elf.SHT_NOBITS || s.Size == 0 {
		return nil
	}
	if s.Flags&elf.SHF_COMPRESSED != 0 {
		return errors.New(".BTF section is compressed: not supported")
	}
	if s.Offset > uint64(t.fileSize) || s.Size > uint64(t.fileSize)-s.Offset {
		return errors.New(".BTF section runs past the end of the file")
	}
	head := make([]byte, btfHeaderLen)
	if _, err := s.ReadAt(head, 0); err != nil {
		return fmt.Errorf(".BTF section: %w", err)
	}
	if err := checkBTFHeader(head, int64(s.Size)); err != nil {
		return fmt.Errorf(".BTF section: %w", err)
	}
	t.hasBTF = true
	t.btfOff, t.btfLen = int64(s.Offset), int64(s.Size)
	return nil
}

// btfInfo is the parsed BTF of one file and the answers given so far. The
// Table's mutex guards it.
type btfInfo struct {
	spec    *btf.Spec
	ptrSize int
	sizes   map[string]uint64
	fields  map[string]layout
	keys    []string     // every type key, for suggestions; built on the first miss
	visits  atomic.Int64 // the member walks' calls: a test bounds them
}

// loadBTF parses t's BTF, once. The caller holds t.mu. The file is read
// again by path and must still be the file that was opened.
func (t *Table) loadBTF() (*btfInfo, error) {
	if t.bt != nil || t.btErr != nil {
		return t.bt, t.btErr
	}
	t.bt, t.btErr = readBTF(t)
	if t.btErr != nil {
		t.btErr = fmt.Errorf("read BTF of %s: %w", t.path, t.btErr)
	}
	return t.bt, t.btErr
}

func readBTF(t *Table) (*btfInfo, error) {
	if t.raw != nil {
		return newBTFInfo(t.raw, t.ptrSize)
	}
	f, err := os.Open(t.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() != t.fileSize {
		return nil, ErrChanged
	}
	if t.format == FormatELF {
		ef, err := elf.NewFile(f)
		if err != nil {
			return nil, err
		}
		if id := buildID(ef); !bytes.Equal(id, t.buildID) {
			return nil, ErrChanged
		}
	}
	raw := make([]byte, t.btfLen)
	if _, err := f.ReadAt(raw, t.btfOff); err != nil && !(errors.Is(err, io.EOF) && t.btfLen == 0) {
		return nil, err
	}
	if !isBTF(raw) {
		return nil, ErrChanged
	}
	bi, err := newBTFInfo(raw, t.ptrSize)
	if err != nil && t.relocatable {
		// a kernel module's .ko: its .BTF is split on the kernel's
		if t.btfBase == "" {
			return nil, fmt.Errorf("%w (a kernel module's BTF is split on the kernel's: give that kernel's vmlinux, or a copy of /sys/kernel/btf/vmlinux from a machine running it, with --symbols too)", err)
		}
		sbi, serr := newSplitBTFInfo(raw, t.btfBase, t.ptrSize)
		if serr != nil {
			return nil, fmt.Errorf("split on %s: %w", t.btfBase, serr)
		}
		return sbi, nil
	}
	if err != nil && t.format == FormatBTF {
		// a kernel module's /sys/kernel/btf/MODULE is split BTF: its
		// types follow vmlinux's, beside it
		base := filepath.Join(filepath.Dir(t.path), "vmlinux")
		if filepath.Base(t.path) != "vmlinux" {
			if sbi, serr := newSplitBTFInfo(raw, base, t.ptrSize); serr == nil {
				return sbi, nil
			}
		}
		return nil, fmt.Errorf("%w (a kernel module's split BTF needs the types of vmlinux beside it, %s)", err, base)
	}
	return bi, err
}

// newSplitBTFInfo parses split BTF (a kernel module's) on the base BTF
// file base (the kernel's).
func newSplitBTFInfo(raw []byte, base string, ptrSize int) (bi *btfInfo, err error) {
	defer recoverBTF(&err)
	bf, err := os.Open(base)
	if err != nil {
		return nil, err
	}
	defer bf.Close()
	var r io.ReaderAt = bf
	if ef, err := elf.NewFile(bf); err == nil {
		// a vmlinux: its .BTF section alone. cilium/ebpf reading the
		// ELF wants a symbol table, which a vmlinux extracted from a
		// vmlinuz has not.
		s := ef.Section(".BTF")
		if s == nil || s.Type == elf.SHT_NOBITS {
			return nil, fmt.Errorf("%s has no .BTF section", base)
		}
		b, err := s.Data()
		if err != nil {
			return nil, fmt.Errorf("%s: .BTF: %w", base, err)
		}
		r = bytes.NewReader(b)
	}
	bs, err := btf.LoadSpecFromReader(r)
	if err != nil {
		return nil, err
	}
	spec, err := btf.LoadSplitSpecFromReader(bytes.NewReader(raw), bs)
	if err != nil {
		return nil, err
	}
	return &btfInfo{spec: spec, ptrSize: ptrSize, sizes: map[string]uint64{}, fields: map[string]layout{}}, nil
}

// newBTFInfo parses a raw BTF blob with cilium/ebpf. raw is not an ELF
// file, so LoadSpecFromReader reads it as raw BTF.
func newBTFInfo(raw []byte, ptrSize int) (bi *btfInfo, err error) {
	defer recoverBTF(&err)
	spec, err := btf.LoadSpecFromReader(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	return &btfInfo{
		spec:    spec,
		ptrSize: ptrSize,
		sizes:   map[string]uint64{},
		fields:  map[string]layout{},
	}, nil
}

// recoverBTF turns a panic of the BTF parser on a malformed file into an
// error, so that a hostile file cannot bring the compiler down.
func recoverBTF(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("malformed BTF: the parser failed: %v", r)
	}
}

// btfLayout answers a type query from t's BTF: the layout of steps in the
// type tn.key (steps empty: the type's size).
func (t *Table) btfLayout(tn typeName, steps []step, cacheKey string) (l layout, found, declared bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	defer recoverBTF(&err)
	bi, err := t.loadBTF()
	if err != nil {
		return l, false, false, err
	}
	if len(steps) == 0 {
		if v, ok := bi.sizes[tn.key]; ok {
			return layout{size: v}, true, true, nil
		}
	} else if l, ok := bi.fields[cacheKey]; ok {
		return l, true, true, nil
	}
	def, found, declared, err := bi.find(tn.key)
	if err != nil || !found {
		return l, false, declared, err
	}
	def, err = bi.resolve(def)
	if err != nil {
		return l, true, true, err
	}
	if len(steps) == 0 {
		v, err := bi.sizeOf(def)
		if err == nil {
			bi.sizes[tn.key] = v
		}
		return layout{size: v}, true, true, err
	}
	l, err = bi.offsetOf(def, tn.key, steps)
	if err == nil {
		bi.fields[cacheKey] = l
	}
	return l, true, true, err
}

// find returns the first complete definition of key, in type ID order, or
// reports that only forward declarations exist.
func (bi *btfInfo) find(key string) (typ btf.Type, found, declared bool, err error) {
	kw, name, tagged := strings.Cut(key, " ")
	switch {
	case tagged && (kw == "struct" || kw == "union" || kw == "enum"):
	case tagged && kw == "class":
		return nil, false, false, nil // BTF describes C
	default:
		kw, name = "", key
	}
	var names []string
	if kw == "" && isBaseKey(key) {
		names = baseSpellings(key)
	} else {
		names = []string{name}
	}
	var emptyEnum btf.Type
	for _, n := range names {
		types, err := bi.spec.AnyTypesByName(n)
		if errors.Is(err, btf.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, false, false, err
		}
		for _, ty := range types {
			switch v := ty.(type) {
			case *btf.Struct:
				if kw == "struct" {
					return v, true, true, nil
				}
			case *btf.Union:
				if kw == "union" {
					return v, true, true, nil
				}
			case *btf.Enum:
				if kw == "enum" {
					if len(v.Values) > 0 {
						return v, true, true, nil
					}
					if emptyEnum == nil {
						emptyEnum = v // enum with no values, or a forward declaration
					}
				}
			case *btf.Fwd:
				if kw == "struct" && v.Kind == btf.FwdStruct || kw == "union" && v.Kind == btf.FwdUnion {
					declared = true
				}
			case *btf.Typedef:
				if kw == "" && v.Name == key {
					return v, true, true, nil
				}
			case *btf.Int:
				if kw == "" && canonBase(strings.Fields(v.Name)) == key {
					return v, true, true, nil
				}
			case *btf.Float:
				if kw == "" && canonBase(strings.Fields(v.Name)) == key {
					return v, true, true, nil
				}
			}
		}
	}
	if emptyEnum != nil {
		return emptyEnum, true, true, nil
	}
	return nil, false, declared, nil
}

// isBaseKey reports whether a normalized type key names a C base type
// spelt with keywords ("unsigned long", "int", "long double"), which BTF
// may spell differently ("long unsigned int").
func isBaseKey(key string) bool {
	for _, w := range strings.Fields(key) {
		switch w {
		case "unsigned", "signed", "short", "long", "int", "char":
			return true
		}
	}
	return false
}

// baseSpellings lists the ways a compiler may name the base type key: every
// order of its words, with "int" and, for a signed type, "signed" added.
// gcc (and pahole's BTF) says "long unsigned int", clang "unsigned long".
// find keeps only the types whose canonical name is key.
func baseSpellings(key string) []string {
	words := strings.Fields(key)
	sets := [][]string{words}
	if !slices.Contains(words, "int") && !slices.Contains(words, "char") {
		sets = append(sets, append(slices.Clone(words), "int"))
	}
	if !slices.Contains(words, "unsigned") && !slices.Contains(words, "char") {
		for _, s := range slices.Clone(sets) {
			sets = append(sets, append(slices.Clone(s), "signed"))
		}
	}
	if key == "unsigned int" {
		sets = append(sets, []string{"unsigned"})
	}
	seen := map[string]bool{}
	var out []string
	for _, s := range sets {
		permute(s, 0, func(p []string) {
			n := strings.Join(p, " ")
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		})
	}
	return out
}

// permute calls f with every ordering of s[k:] after s[:k].
func permute(s []string, k int, f func([]string)) {
	if k == len(s) {
		f(s)
		return
	}
	for i := k; i < len(s); i++ {
		s[k], s[i] = s[i], s[k]
		permute(s, k+1, f)
		s[k], s[i] = s[i], s[k]
	}
}

// resolve follows typedefs, qualifiers and type tags to the type they name,
// and a forward declaration to a complete definition of the same name.
// A typedef of void comes back as *btf.Void.
func (bi *btfInfo) resolve(ty btf.Type) (btf.Type, error) {
	for range maxChain {
		switch v := ty.(type) {
		case *btf.Typedef:
			ty = v.Type
		case *btf.Const:
			ty = v.Type
		case *btf.Volatile:
			ty = v.Type
		case *btf.Restrict:
			ty = v.Type
		case *btf.TypeTag:
			ty = v.Type
		case *btf.Fwd:
			key := v.Kind.String() + " " + v.Name
			def, found, _, err := bi.find(key)
			if err != nil {
				return ty, err
			}
			if !found {
				return ty, fmt.Errorf("%s: %w", key, ErrIncompleteType)
			}
			return def, nil
		case nil:
			return (*btf.Void)(nil), nil
		default:
			return ty, nil
		}
	}
	return ty, fmt.Errorf("type %s: typedef chain longer than %d", ty, maxChain)
}

// describeBTF names a resolved type for an error message, as describe does
// for DWARF.
func describeBTF(ty btf.Type) string {
	switch v := ty.(type) {
	case *btf.Struct:
		return tagged("struct", v.Name)
	case *btf.Union:
		return tagged("union", v.Name)
	case *btf.Enum:
		return tagged("enum", v.Name)
	case *btf.Fwd:
		return tagged(v.Kind.String(), v.Name)
	case *btf.Pointer:
		return "a pointer"
	case *btf.Array:
		return "an array"
	case *btf.FuncProto, *btf.Func:
		return "a function type"
	case *btf.Void:
		return "void"
	case *btf.Int:
		return v.Name
	case *btf.Float:
		return v.Name
	}
	return fmt.Sprintf("%T", ty)
}

func tagged(kw, name string) string {
	if name == "" {
		return "an anonymous " + kw
	}
	return kw + " " + name
}

// sizeOf is the size in bytes of the resolved type ty.
func (bi *btfInfo) sizeOf(ty btf.Type) (uint64, error) {
	n := uint64(1)
	for range maxChain {
		var elem uint64
		switch v := ty.(type) {
		case *btf.Pointer:
			elem = uint64(bi.ptrSize)
		case *btf.Array:
			if v.Nelems > 0 && n > (1<<63)/uint64(v.Nelems) {
				return 0, errors.New("array size overflows")
			}
			n *= uint64(v.Nelems)
			var err error
			if ty, err = bi.resolve(v.Type); err != nil {
				return 0, err
			}
			continue
		case *btf.Int:
			elem = uint64(v.Size)
		case *btf.Enum:
			elem = uint64(v.Size)
		case *btf.Struct:
			elem = uint64(v.Size)
		case *btf.Union:
			elem = uint64(v.Size)
		case *btf.Float:
			elem = uint64(v.Size)
		case *btf.FuncProto, *btf.Func:
			return 0, errors.New("a function type has no size")
		default:
			return 0, fmt.Errorf("%s has no size", describeBTF(ty))
		}
		if elem > 0 && n > (1<<63)/elem {
			return 0, errors.New("array size overflows")
		}
		return n * elem, nil
	}
	return 0, fmt.Errorf("type %s: array nesting deeper than %d", ty, maxChain)
}

// membersOf returns the members of a struct or union, nil for other types.
func membersOf(ty btf.Type) ([]btf.Member, bool) {
	switch v := ty.(type) {
	case *btf.Struct:
		return v.Members, true
	case *btf.Union:
		return v.Members, true
	}
	return nil, false
}

// findMember looks name up among the members of ty, then inside its
// anonymous struct and union members; off is the bit offset from ty.
// visited holds the types searched already in vain, so that a hostile
// file whose anonymous members share or repeat types costs one visit each.
func (bi *btfInfo) findMember(ty btf.Type, name string, depth int, visited map[btf.Type]bool) (m btf.Member, off btf.Bits, ok bool, err error) {
	bi.visits.Add(1)
	if depth > maxChain {
		return m, 0, false, fmt.Errorf("anonymous members of %s nest deeper than %d", describeBTF(ty), maxChain)
	}
	if visited[ty] {
		return m, 0, false, nil
	}
	visited[ty] = true
	ms, _ := membersOf(ty)
	for _, m := range ms {
		if m.Name == name {
			return m, m.Offset, true, nil
		}
	}
	for _, am := range ms {
		if am.Name != "" {
			continue
		}
		sub, err := bi.resolve(am.Type)
		if err != nil {
			return m, 0, false, err
		}
		if _, agg := membersOf(sub); !agg {
			continue
		}
		if m, off, ok, err := bi.findMember(sub, name, depth+1, visited); ok || err != nil {
			return m, am.Offset + off, ok, err
		}
	}
	return m, 0, false, nil
}

// fieldNames lists the member names visible in ty, through anonymous members.
func (bi *btfInfo) fieldNames(ty btf.Type, visited map[btf.Type]bool, out []string) []string {
	bi.visits.Add(1)
	ms, _ := membersOf(ty)
	if visited[ty] {
		return out
	}
	visited[ty] = true
	for _, m := range ms {
		if m.Name != "" {
			out = append(out, m.Name)
			continue
		}
		if sub, err := bi.resolve(m.Type); err == nil {
			out = bi.fieldNames(sub, visited, out)
		}
	}
	return out
}

// offsetOf walks steps from the resolved type ty, with the rules and the
// messages of the DWARF walk (dwarfInfo.offsetOf).
func (bi *btfInfo) offsetOf(ty btf.Type, typeKey string, steps []step) (layout, error) {
	var off uint64
	cur := ty
	for k, st := range steps {
		here := pathString(steps[:k])
		if st.isIdx {
			arr, ok := cur.(*btf.Array)
			if !ok {
				return layout{}, fmt.Errorf("%s is %s, not an array: it cannot be indexed", here, describeBTF(cur))
			}
			// BTF spells both char tail[] and char tail[0] as 0 elements:
			// either takes any index.
			if arr.Nelems > 0 && st.index >= uint64(arr.Nelems) {
				return layout{}, fmt.Errorf("index %d out of range: %s has %d elements", st.index, here, arr.Nelems)
			}
			elem, err := bi.resolve(arr.Type)
			if err != nil {
				return layout{}, err
			}
			stride, err := bi.sizeOf(elem)
			if err != nil {
				return layout{}, fmt.Errorf("element of %s: %w", here, err)
			}
			if stride > 0 && st.index > (1<<63)/stride {
				return layout{}, fmt.Errorf("index %d of %s: offset overflows", st.index, here)
			}
			off += st.index * stride
			cur = elem
			continue
		}
		if _, ok := cur.(*btf.Array); ok {
			return layout{}, fmt.Errorf("%s is an array: index it before selecting .%s", here, st.name)
		}
		if _, ok := membersOf(cur); !ok {
			what := here
			if k == 0 {
				what = typeKey
			}
			return layout{}, fmt.Errorf("%s is %s, not a struct or union: it has no member %q", what, describeBTF(cur), st.name)
		}
		m, bits, ok, err := bi.findMember(cur, st.name, 0, map[btf.Type]bool{})
		if err != nil {
			return layout{}, err
		}
		if !ok {
			in := describeBTF(cur)
			if k > 0 && cur.TypeName() == "" {
				in = typeKey + " member " + here
			} else if k == 0 {
				in = typeKey
			}
			sg := newSuggester(st.name, true)
			for _, n := range bi.fieldNames(cur, map[btf.Type]bool{}, nil) {
				sg.add(n)
			}
			return layout{}, &NotFoundError{What: "field", Name: st.name, In: in, Suggestions: sg.names()}
		}
		if m.BitfieldSize > 0 {
			return layout{}, fmt.Errorf("field %s is %d bits wide: %w", pathString(steps[:k+1]), m.BitfieldSize, ErrBitField)
		}
		if bits%8 != 0 {
			return layout{}, fmt.Errorf("field %s starts at bit %d: %w", pathString(steps[:k+1]), bits, ErrBitField)
		}
		off += uint64(bits / 8)
		if cur, err = bi.resolve(m.Type); err != nil {
			return layout{}, err
		}
	}
	l := layout{off: off}
	l.size, l.sizeErr = bi.sizeOf(cur)
	return l, nil
}

// typeKeys lists the keys of every named struct, union, enum, typedef and
// base type, for suggestions. It decodes every type, once.
func (bi *btfInfo) typeKeys() []string {
	if bi.keys != nil {
		return bi.keys
	}
	seen := map[string]bool{}
	bi.keys = []string{}
	for ty, err := range bi.spec.All() {
		if err != nil {
			break
		}
		var key string
		switch v := ty.(type) {
		case *btf.Struct:
			key = "struct " + v.Name
		case *btf.Union:
			key = "union " + v.Name
		case *btf.Enum:
			key = "enum " + v.Name
		case *btf.Fwd:
			key = v.Kind.String() + " " + v.Name
		case *btf.Typedef:
			key = v.Name
		case *btf.Int:
			key = canonBase(strings.Fields(v.Name))
		case *btf.Float:
			key = canonBase(strings.Fields(v.Name))
		}
		if key != "" && ty.TypeName() != "" && !seen[key] {
			seen[key] = true
			bi.keys = append(bi.keys, key)
		}
	}
	return bi.keys
}

// btfNames adds the type keys of t's BTF to sg, if it was loaded.
func (t *Table) btfNames(sg *suggester) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.bt == nil {
		return
	}
	var err error
	defer recoverBTF(&err)
	for _, k := range t.bt.typeKeys() {
		sg.add(k)
	}
}
