package symbols

import (
	"fmt"
	"strconv"
	"strings"
)

// typeName is a parsed C type name: the key it has in the type index and how
// many pointer levels follow it.
type typeName struct {
	key string // "struct task_struct", "unsigned long", "pid_t"
	ptr int    // number of trailing '*'
}

// parseTypeName reads "struct task_struct", "union foo", "enum bar", "class
// x", a base type ("unsigned long", "long unsigned int"), or a typedef name,
// with const/volatile qualifiers anywhere and optional trailing '*'s.
func parseTypeName(s string) (typeName, error) {
	var tn typeName
	toks := strings.Fields(strings.ReplaceAll(s, "*", " * "))
	words := toks[:0:0]
	for i, tok := range toks {
		switch tok {
		case "const", "volatile", "restrict", "__restrict", "__restrict__", "_Atomic":
			continue
		case "*":
			tn.ptr++
			continue
		}
		if tn.ptr > 0 {
			return tn, fmt.Errorf("type name %q: %q after '*': want TYPE or TYPE *", s, toks[i])
		}
		if !isIdent(tok) {
			return tn, fmt.Errorf("type name %q: %q is not an identifier", s, tok)
		}
		words = append(words, tok)
	}
	if len(words) == 0 {
		return tn, fmt.Errorf("type name %q: want a type such as \"struct task_struct\" or \"unsigned long\"", s)
	}
	switch words[0] {
	case "struct", "union", "enum", "class":
		if len(words) != 2 {
			return tn, fmt.Errorf("type name %q: want %s NAME", s, words[0])
		}
		tn.key = words[0] + " " + words[1]
		return tn, nil
	}
	tn.key = canonBase(words)
	return tn, nil
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || (i > 0 && ('0' <= c && c <= '9')) || c == '.' || c == ':' {
			continue
		}
		return false
	}
	return true
}

// canonBase spells a C base type one way, so that "unsigned long" (the
// query), "long unsigned int" (gcc's DWARF) and "unsigned long" (clang's)
// meet. A single word that is not a C keyword (a typedef) is itself.
func canonBase(words []string) string {
	if len(words) == 1 {
		switch words[0] {
		case "unsigned", "signed", "short", "long", "int":
		default:
			return words[0]
		}
	}
	var unsigned, signed bool
	var short, long, char, intw int
	var others []string
	for _, w := range words {
		switch w {
		case "unsigned":
			unsigned = true
		case "signed":
			signed = true
		case "short":
			short++
		case "long":
			long++
		case "char":
			char++
		case "int":
			intw++
		default:
			others = append(others, w)
		}
	}
	sign := ""
	if unsigned {
		sign = "unsigned "
	}
	switch {
	case len(others) > 0:
		// long double, __int128 unsigned, complex float, ...
		var b strings.Builder
		b.WriteString(sign)
		for range long {
			b.WriteString("long ")
		}
		if short > 0 {
			b.WriteString("short ")
		}
		b.WriteString(strings.Join(others, " "))
		return b.String()
	case char > 0:
		if signed && !unsigned {
			return "signed char"
		}
		return sign + "char"
	case short > 0:
		return sign + "short"
	case long == 1:
		return sign + "long"
	case long >= 2:
		return sign + "long long"
	}
	return sign + "int"
}

// step is one element of an offsetof field path: a member name or an array
// index.
type step struct {
	name  string
	index uint64
	isIdx bool
}

// parseFieldPath reads "pid", "a.b", "arr[3]", "a.b[2].c", "m[1][2]". Blanks
// around '.', '[' and ']' are allowed.
func parseFieldPath(s string) ([]step, error) {
	var steps []step
	p := s
	i := 0
	skip := func() {
		for i < len(p) && isBlank(p[i]) {
			i++
		}
	}
	for {
		skip()
		if i == len(p) {
			break
		}
		c := p[i]
		switch {
		case c == '[':
			if len(steps) == 0 {
				return nil, fmt.Errorf("field path %q: an index needs a member before it", s)
			}
			j := strings.IndexByte(p[i:], ']')
			if j < 0 {
				return nil, fmt.Errorf("field path %q: '[' without ']'", s)
			}
			num := strings.TrimSpace(p[i+1 : i+j])
			n, err := strconv.ParseUint(num, 0, 64)
			if err != nil {
				return nil, fmt.Errorf("field path %q: index %q is not a non-negative integer constant", s, num)
			}
			steps = append(steps, step{index: n, isIdx: true})
			i += j + 1
			continue
		case c == '.':
			if len(steps) == 0 {
				return nil, fmt.Errorf("field path %q: starts with '.': want a member name first", s)
			}
			i++
			skip()
		case len(steps) > 0:
			return nil, fmt.Errorf("field path %q: unexpected %q: want .MEMBER or [INDEX]", s, p[i:])
		}
		j := i
		for j < len(p) && (p[j] == '_' || ('a' <= p[j] && p[j] <= 'z') || ('A' <= p[j] && p[j] <= 'Z') || (j > i && '0' <= p[j] && p[j] <= '9')) {
			j++
		}
		if j == i {
			return nil, fmt.Errorf("field path %q: want a member name at %q", s, p[i:])
		}
		steps = append(steps, step{name: p[i:j]})
		i = j
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("field path %q: want a member name such as pid or a.b[2].c", s)
	}
	return steps, nil
}

// pathString spells steps[:n] back as a field path.
func pathString(steps []step) string {
	var b strings.Builder
	for i, st := range steps {
		if st.isIdx {
			fmt.Fprintf(&b, "[%d]", st.index)
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(st.name)
	}
	return b.String()
}
