package repocheck

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/internal/testkit"
)

// citation is what code and docs must not lean on: the product
// specification's sections and the issue tracker's numbers, neither of
// which is in the repository. A comment or a page says the fact itself, or
// names the docs/ page that holds it. Built from pieces so that this file
// does not match itself.
var citation = regexp.MustCompile(`SPEC ` + `§|\b[Ii]ssues? #?[0-9]|\b[Ii]ssue-[0-9]`)

// TestNoCitations scans every .go and .md file git tracks and names each
// line that cites the specification's sections or an issue number.
func TestNoCitations(t *testing.T) {
	git := testkit.Tool(t, "git")
	top, err := exec.Command(git, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		testkit.SkipOrFail(t, "not in a git checkout: %v", err)
	}
	root := strings.TrimSpace(string(top))
	cmd := exec.Command(git, "ls-files", "-z", "--", "*.go", "*.md")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	files := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if len(files) < 100 {
		t.Fatalf("git ls-files lists %d .go and .md files: the test no longer sees the tree", len(files))
	}
	scanned := 0
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f))
		if os.IsNotExist(err) {
			continue // deleted in the working tree, not yet in the index
		}
		if err != nil {
			t.Fatal(err)
		}
		scanned++
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<20)
		for n := 1; sc.Scan(); n++ {
			if m := citation.FindString(sc.Text()); m != "" {
				t.Errorf("%s:%d: cites %q: write the fact, or the docs/ page that holds it\n\t%s", f, n, m, strings.TrimSpace(sc.Text()))
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	if scanned == 0 {
		t.Fatal("no file scanned")
	}
}

// TestCitationPattern checks the pattern on the forms it must catch and
// the ones it must let through (another project's issue, by its address).
func TestCitationPattern(t *testing.T) {
	for _, s := range []string{"(SPEC " + "§6)", "issue" + " 12", "(Issue" + " 9.2)", "issue" + "-11 work", "issues" + " 14 and 15", "issue" + " #33"} {
		if !citation.MatchString(s) {
			t.Errorf("%q is not caught", s)
		}
	}
	for _, s := range []string{"https://github.com/acmel/dwarves/issues/33", "the issue tracker", "an issue with it"} {
		if citation.MatchString(s) {
			t.Errorf("%q is caught", s)
		}
	}
}
