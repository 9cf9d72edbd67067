package dpdf

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/alecthomas/participle/v2/lexer"
)

// ErrNoPreprocessor is reported (inside an ErrorList entry positioned at
// the first directive) when a DPDF uses '#' directives and no C
// preprocessor can be found.
var ErrNoPreprocessor = errors.New("no C preprocessor found: install cpp (apt-get install cpp) or set GPROBES_CPP to a preprocessor command")

// findCPP returns the preprocessor command: opts.CPP, $GPROBES_CPP, then
// cpp, gcc -E -x c, cc -E -x c from PATH.
func findCPP(opts Options) ([]string, error) {
	if opts.CPP != "" {
		return strings.Fields(opts.CPP), nil
	}
	if env := os.Getenv("GPROBES_CPP"); env != "" {
		return strings.Fields(env), nil
	}
	for _, c := range [][]string{{"cpp"}, {"gcc", "-E", "-x", "c"}, {"cc", "-E", "-x", "c"}} {
		if _, err := exec.LookPath(c[0]); err == nil {
			return c, nil
		}
	}
	return nil, ErrNoPreprocessor
}

// preprocess runs the C preprocessor over a DPDF and returns its output
// with line markers, and the files it read (deps). Preprocessor errors
// come back as an ErrorList in the user's files and lines.
func preprocess(path string, data string, opts Options, onDisk bool) (string, []string, error) {
	firstDirective := lexer.Position{Filename: path, Line: 1, Column: 1}
	for i, l := range strings.Split(strings.TrimPrefix(data, bom), "\n") {
		if t := strings.TrimLeft(l, " \t"); strings.HasPrefix(t, "#") {
			firstDirective.Line = i + 1
			firstDirective.Column = len(l) - len(t) + 1
			break
		}
	}
	cmd, err := findCPP(opts)
	if err != nil {
		var l ErrorList
		l.add(firstDirective, "this file uses preprocessor directives: %v", err)
		return "", nil, l
	}
	input := path
	if !onDisk {
		tmp, err := os.CreateTemp("", "gprobes-*.dpdf")
		if err != nil {
			return "", nil, fmt.Errorf("preprocess: %w", err)
		}
		defer os.Remove(tmp.Name())
		if _, err := tmp.WriteString(data); err != nil {
			tmp.Close()
			return "", nil, fmt.Errorf("preprocess: %w", err)
		}
		tmp.Close()
		input = tmp.Name()
	}
	args := append([]string{}, cmd[1:]...)
	args = append(args, "-undef", "-nostdinc", "-D__GPROBES__=1")
	for _, d := range opts.Defines {
		args = append(args, "-D"+d)
	}
	for _, inc := range opts.Includes {
		args = append(args, "-I"+inc)
	}
	if !onDisk {
		args = append(args, "-I.")
	}
	args = append(args, input)
	c := exec.Command(cmd[0], args...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	runErr := c.Run()
	out := stdout.String()
	if !onDisk {
		out = strings.ReplaceAll(out, strconv.Quote(input), strconv.Quote(path))
	}
	if runErr != nil {
		var l ErrorList
		msgs := strings.ReplaceAll(stderr.String(), input, path)
		for _, line := range strings.Split(msgs, "\n") {
			m := cppDiag.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			ln, _ := strconv.Atoi(m[2])
			col, _ := strconv.Atoi(m[3])
			l.add(lexer.Position{Filename: m[1], Line: ln, Column: col}, "%s", m[5])
		}
		if len(l) == 0 {
			var ee *exec.ExitError
			if !errors.As(runErr, &ee) {
				l.add(firstDirective, "run the C preprocessor %s: %v", cmd[0], runErr)
			} else {
				l.add(firstDirective, "the C preprocessor %s failed: %s", cmd[0], strings.TrimSpace(msgs))
			}
		}
		return "", nil, l
	}
	return out, markerDeps(out, path), nil
}

// cppDiag matches a GCC-style diagnostic: file:line:col: error: message.
var cppDiag = regexp.MustCompile(`^(.+?):(\d+):(\d+): (fatal error|error): (.*)$`)

// markerDeps lists the files named by line markers, the DPDF first,
// without the preprocessor's pseudo-files and system headers.
func markerDeps(out, path string) []string {
	deps := []string{path}
	seen := map[string]bool{path: true}
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "# ") {
			continue
		}
		f := strings.Fields(line[2:])
		if len(f) < 2 {
			continue
		}
		name, err := strconv.Unquote(f[1])
		if err != nil || strings.HasPrefix(name, "<") || seen[name] {
			continue
		}
		system := false
		for _, flag := range f[2:] {
			if flag == "3" {
				system = true
			}
		}
		if system {
			continue
		}
		seen[name] = true
		deps = append(deps, filepath.Clean(name))
	}
	return deps
}
