package repocheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/internal/testkit"
)

// layoutRow is a row of README.md's layout table: "| `dir/` | what it is |".
var layoutRow = regexp.MustCompile("^\\| `([^`]+)/` \\| (.+) \\|$")

// TestReadmeLayout checks that README.md's layout table has a row for
// every package of the module (go list ./...), each saying what it is,
// and no row for a folder that is gone.
func TestReadmeLayout(t *testing.T) {
	goTool := testkit.Tool(t, "go")
	cmd := exec.Command(goTool, "list", "-f", "{{.Dir}}", "./...")
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	root, err := filepath.Abs(cmd.Dir)
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	inLayout := false
	for _, line := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(line, "## ") {
			inLayout = line == "## Layout"
			continue
		}
		m := layoutRow.FindStringSubmatch(line)
		if !inLayout || m == nil {
			continue
		}
		if listed[m[1]] {
			t.Errorf("README.md's layout lists %s/ twice", m[1])
		}
		listed[m[1]] = true
		if strings.TrimSpace(m[2]) == "" {
			t.Errorf("README.md's layout: %s/ says nothing of what it is", m[1])
		}
		if fi, err := os.Stat(filepath.Join(root, m[1])); err != nil || !fi.IsDir() {
			t.Errorf("README.md's layout lists %s/, which is not a folder of the tree", m[1])
		}
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 20 || len(listed) == 0 {
		t.Fatalf("go list gave %d packages and the layout table %d rows: the test no longer sees what it checks", len(pkgs), len(listed))
	}
	for _, dir := range pkgs {
		rel, err := filepath.Rel(root, dir)
		if err != nil || rel == "." {
			t.Errorf("package folder %s is not below %s", dir, root)
			continue
		}
		rel = filepath.ToSlash(rel)
		if !listed[rel] {
			t.Errorf("README.md's layout has no row for package %s/ (\"| `%s/` | what it is |\")", rel, rel)
		}
	}
}
