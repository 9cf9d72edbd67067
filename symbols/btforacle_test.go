package symbols

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"testing"
)

// rawBTF is the test oracle for BTF layouts: a reader of the raw type
// section written from the kernel's Documentation/bpf/btf.rst, sharing no
// code with cilium/ebpf's parser that the package uses. It knows what layout
// questions need: names, sizes, struct and union members, arrays, and the
// chains of typedefs and qualifiers.
type rawBTF struct {
	types  []rawType // index = type ID; 0 is void
	byName map[string][]int
}

type rawType struct {
	kind   int
	name   string
	vlen   int
	size   uint32 // INT, STRUCT, UNION, ENUM, ENUM64, FLOAT, DATASEC
	ref    uint32 // PTR, TYPEDEF, qualifiers, ARRAY element, FUNC, VAR
	nelems uint32 // ARRAY
	intOff uint32 // INT: BTF_INT_OFFSET
	intBit uint32 // INT: BTF_INT_BITS
	mems   []rawMember
}

type rawMember struct {
	name    string
	typ     uint32
	bitOff  uint32
	bitSize uint32 // 0: not a bit-field (with kind_flag); see isBitfield
}

// BTF kinds (include/uapi/linux/btf.h).
const (
	rkInt = iota + 1
	rkPtr
	rkArray
	rkStruct
	rkUnion
	rkEnum
	rkFwd
	rkTypedef
	rkVolatile
	rkConst
	rkRestrict
	rkFunc
	rkFuncProto
	rkVar
	rkDatasec
	rkFloat
	rkDeclTag
	rkTypeTag
	rkEnum64
)

// readRawBTF reads a raw BTF file, or the .BTF section of an ELF file.
func readRawBTF(t testing.TB, path string) *rawBTF {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b[:4]) == "\x7fELF" {
		ef, err := elf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer ef.Close()
		s := ef.Section(".BTF")
		if s == nil {
			t.Fatalf("%s: no .BTF section", path)
		}
		if b, err = s.Data(); err != nil {
			t.Fatal(err)
		}
	}
	r, err := parseRawBTF(b)
	if err != nil {
		t.Fatalf("%s: oracle: %v", path, err)
	}
	return r
}

func parseRawBTF(b []byte) (*rawBTF, error) {
	if len(b) < 24 {
		return nil, fmt.Errorf("short header")
	}
	var bo binary.ByteOrder = binary.LittleEndian
	if bo.Uint16(b) != 0xeb9f {
		bo = binary.BigEndian
		if bo.Uint16(b) != 0xeb9f {
			return nil, fmt.Errorf("bad magic")
		}
	}
	hdrLen := bo.Uint32(b[4:])
	typeOff, typeLen := bo.Uint32(b[8:]), bo.Uint32(b[12:])
	strOff, strLen := bo.Uint32(b[16:]), bo.Uint32(b[20:])
	body := b[hdrLen:]
	ts := body[typeOff : typeOff+typeLen]
	strs := body[strOff : strOff+strLen]
	str := func(off uint32) string {
		if off >= uint32(len(strs)) {
			return "<bad string>"
		}
		e := off
		for e < uint32(len(strs)) && strs[e] != 0 {
			e++
		}
		return string(strs[off:e])
	}
	r := &rawBTF{types: []rawType{{}}, byName: map[string][]int{}}
	for p := 0; p < len(ts); {
		if p+12 > len(ts) {
			return nil, fmt.Errorf("truncated type at %d", p)
		}
		nameOff, info, sz := bo.Uint32(ts[p:]), bo.Uint32(ts[p+4:]), bo.Uint32(ts[p+8:])
		p += 12
		vlen := int(info & 0xffff)
		kind := int(info>>24) & 0x1f
		kflag := info>>31 == 1
		rt := rawType{kind: kind, name: str(nameOff), vlen: vlen}
		switch kind {
		case rkInt:
			v := bo.Uint32(ts[p:])
			rt.size, rt.intOff, rt.intBit = sz, (v>>16)&0xff, v&0xff
			p += 4
		case rkPtr, rkTypedef, rkVolatile, rkConst, rkRestrict, rkFunc, rkTypeTag, rkFwd:
			rt.ref = sz
		case rkArray:
			rt.ref, rt.nelems = bo.Uint32(ts[p:]), bo.Uint32(ts[p+8:])
			p += 12
		case rkStruct, rkUnion:
			rt.size = sz
			for range vlen {
				m := rawMember{name: str(bo.Uint32(ts[p:])), typ: bo.Uint32(ts[p+4:])}
				off := bo.Uint32(ts[p+8:])
				if kflag {
					m.bitSize, m.bitOff = off>>24, off&0xffffff
				} else {
					m.bitOff = off
				}
				rt.mems = append(rt.mems, m)
				p += 12
			}
		case rkEnum:
			rt.size = sz
			p += 8 * vlen
		case rkEnum64:
			rt.size = sz
			p += 12 * vlen
		case rkFuncProto:
			rt.ref = sz
			p += 8 * vlen
		case rkVar, rkDeclTag:
			rt.ref = sz
			p += 4
		case rkDatasec:
			rt.size = sz
			p += 12 * vlen
		case rkFloat:
			rt.size = sz
		default:
			return nil, fmt.Errorf("type %d: unknown kind %d", len(r.types), kind)
		}
		if p > len(ts) {
			return nil, fmt.Errorf("type %d runs past the type section", len(r.types))
		}
		if rt.name != "" {
			r.byName[rt.name] = append(r.byName[rt.name], len(r.types))
		}
		r.types = append(r.types, rt)
	}
	return r, nil
}

// strip follows typedefs, qualifiers and type tags.
func (r *rawBTF) strip(id uint32) uint32 {
	for range 64 {
		switch r.types[id].kind {
		case rkTypedef, rkVolatile, rkConst, rkRestrict, rkTypeTag:
			id = r.types[id].ref
		default:
			return id
		}
	}
	panic("typedef loop")
}

// sizeof is the size of type id, ok false when it has none.
func (r *rawBTF) sizeof(id uint32) (uint64, bool) {
	id = r.strip(id)
	ty := r.types[id]
	switch ty.kind {
	case rkPtr:
		return 8, true
	case rkArray:
		n, ok := r.sizeof(ty.ref)
		return n * uint64(ty.nelems), ok
	case rkInt, rkStruct, rkUnion, rkEnum, rkEnum64, rkFloat:
		return uint64(ty.size), true
	}
	return 0, false
}

// structID is the first STRUCT (or UNION) of that name, in ID order.
func (r *rawBTF) structID(kind int, name string) (uint32, bool) {
	for _, id := range r.byName[name] {
		if r.types[id].kind == kind {
			return uint32(id), true
		}
	}
	return 0, false
}

// oracleField is one member reachable by name from a struct: directly, or
// through anonymous struct and union members.
type oracleField struct {
	name     string
	bitOff   uint64 // from the start of the outer struct
	typ      uint32
	bitfield bool
}

// fields lists the members of struct or union id as offsetof finds them by
// name: the direct members first, then, in order, what each anonymous
// member makes visible. A name seen earlier hides a later one.
func (r *rawBTF) fields(id uint32) []oracleField {
	var out []oracleField
	seen := map[string]bool{}
	var walk func(id uint32, base uint64, depth int)
	walk = func(id uint32, base uint64, depth int) {
		ty := r.types[id]
		for _, m := range ty.mems {
			if m.name == "" || seen[m.name] {
				continue
			}
			seen[m.name] = true
			out = append(out, oracleField{name: m.name, bitOff: base + uint64(m.bitOff), typ: m.typ, bitfield: r.isBitfield(m)})
		}
		if depth > 64 {
			return
		}
		for _, m := range ty.mems {
			if m.name != "" {
				continue
			}
			sub := r.strip(m.typ)
			if k := r.types[sub].kind; k == rkStruct || k == rkUnion {
				walk(sub, base+uint64(m.bitOff), depth+1)
			}
		}
	}
	walk(id, 0, 0)
	return out
}

// isBitfield: a bit size with kind_flag, or the old encoding (no kind_flag)
// in which the member's INT type carries an offset or a width narrower
// than its size.
func (r *rawBTF) isBitfield(m rawMember) bool {
	if m.bitSize != 0 {
		return true
	}
	ty := r.types[m.typ]
	return ty.kind == rkInt && (ty.intOff != 0 || uint64(ty.intBit) != 8*uint64(ty.size)) || m.bitOff%8 != 0
}
