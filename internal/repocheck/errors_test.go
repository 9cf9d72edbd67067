package repocheck

import (
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/internal/testkit"
)

// backends are the packages where a dropped error can leave a target
// changed without anyone told: the engine and what it drives.
var backends = []string{"engine", "ptrace", "xen", "gdbtarget", "kernel", "bpf", "linuxkernel"}

// cleanups are calls whose error says only that a release failed (a
// file, a mapping): dropping it changes nothing a user could act on.
var cleanups = map[string]bool{"Close": true, "Munmap": true, "Remove": true, "RemoveAll": true, "unmapRing": true, "UnmapFrame": true}

// TestNoDroppedErrors: in the engine and the backends, no call's error is
// dropped unread. Each is returned, joined to the error returned, told to
// the user through the target's warnings (engine.Warner), or, where
// dropping it is right, the call says why on its line or the line above
// with a comment "unchecked: REASON" (on the call's line, or ending on
// the line above). Releases (Close, Munmap, Remove)
// are exempt, as are fmt's prints and builders' writes. The files are the
// linux/amd64 build's, type-checked from source.
func TestNoDroppedErrors(t *testing.T) {
	testkit.SkipShort(t, "type-checks the backends and their dependencies from source")
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "source", nil)
	errType := types.Universe.Lookup("error").Type()
	bctx := build.Default
	bctx.GOOS, bctx.GOARCH = "linux", "amd64"
	var found []string
	for _, pkg := range backends {
		dir := filepath.Join(root, pkg)
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var files []*ast.File
		for _, e := range ents {
			name := e.Name()
			if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			if ok, err := bctx.MatchFile(dir, name); err != nil || !ok {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		if len(files) == 0 {
			t.Fatalf("%s: no Go file for linux/amd64: the test no longer sees what it is about", pkg)
		}
		info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Uses: map[*ast.Ident]types.Object{}}
		conf := types.Config{Importer: imp.(types.ImporterFrom)}
		if _, err := conf.Check(pkg, fset, files, info); err != nil {
			t.Fatalf("type-checking %s: %v", pkg, err)
		}
		for _, f := range files {
			// the lines a comment saying "unchecked: REASON" covers: its
			// own (a comment after the call) and the line after it
			said := map[int]bool{}
			for _, cg := range f.Comments {
				_, why, ok := strings.Cut(cg.Text(), "unchecked:")
				if !ok || strings.TrimSpace(why) == "" {
					continue
				}
				for l := fset.Position(cg.Pos()).Line; l <= fset.Position(cg.End()).Line+1; l++ {
					said[l] = true
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				var call *ast.CallExpr
				switch s := n.(type) {
				case *ast.ExprStmt:
					call, _ = s.X.(*ast.CallExpr)
				case *ast.DeferStmt:
					call = s.Call
				case *ast.GoStmt:
					call = s.Call
				}
				if call == nil || !returnsError(info.Types[call].Type, errType) {
					return true
				}
				name := types.ExprString(call.Fun)
				last := name[strings.LastIndexByte(name, '.')+1:]
				pos := fset.Position(call.Pos())
				switch {
				case cleanups[last], strings.HasPrefix(name, "fmt."), last == "WriteString" || last == "WriteByte" || last == "WriteRune":
				case said[pos.Line]:
				default:
					rel, _ := filepath.Rel(root, pos.Filename)
					found = append(found, rel+":"+itoa(pos.Line)+": "+name)
				}
				return true
			})
		}
	}
	sort.Strings(found)
	for _, f := range found {
		t.Errorf("%s: its error is dropped: return it, join it, warn (engine.Warner), or say why with // unchecked: REASON", f)
	}
}

// returnsError reports whether a call's type is error or a tuple holding
// one.
func returnsError(tt types.Type, errType types.Type) bool {
	switch tt := tt.(type) {
	case nil:
		return false
	case *types.Tuple:
		for i := 0; i < tt.Len(); i++ {
			if types.Identical(tt.At(i).Type(), errType) {
				return true
			}
		}
		return false
	default:
		return types.Identical(tt, errType)
	}
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}
