package dpdf

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/alecthomas/participle/v2/lexer"
)

// Reader reads a DPDF a statement at a time, each in its place in the file
// structure (a header keyword, the start of a probe, a keyword of that
// probe, a statement of its program). It lexes and parses the file in
// batches of statements, so memory holds one batch's tokens and trees, not
// the whole file's: what the compiler keeps of a statement is its code.
// Parse is a Reader whose items are collected into a File.
type Reader struct {
	Path         string
	Deps         []string // files read: the DPDF, then every #include, in order of first use
	Preprocessed bool

	src  *sources
	text string
	sc   *scanner
	errs ErrorList
	col  columnCursor // fixColumns' place, from one batch to the next

	batch   []Item
	at      int  // next item of batch
	scanned bool // the scanner reached the end of the text
	ended   bool // the end-of-file checks ran

	// the file structure so far
	probes     int
	inBody     bool   // the current probe's program started
	start      string // the keyword that started the current probe, canonical
	seenHeader map[string]*KeyValue
	seenProbe  map[string]*KeyValue

	replay func() (Item, bool) // a Reader over a parsed File (File.Reader)
}

// Item is one statement of a DPDF in its place in the file structure.
// Exactly one field is set.
type Item struct {
	Header *KeyValue // a header keyword
	// Probe: a probe starts, at its Pos with its Offset line. Its
	// keywords and program follow as Key and Stmt items (a File's
	// ProbeDef also holds them; a Reader's does not).
	Probe *ProbeDef
	Key   *KeyValue // a keyword of the probe that started last
	Stmt  *Stmt     // a label and/or an instruction of the probe that started last
}

// batchStatements is how many statements a Reader lexes and parses at a
// time (on every CPU): large enough to keep the CPUs busy, small enough
// that a batch's trees are a few megabytes.
var batchStatements = 4096

// Open reads the DPDF at path (through the C preprocessor when a line
// starts with '#') and returns a Reader of its statements. The error is an
// I/O error, or an ErrorList of preprocessor errors; syntax errors come
// from Reader.Errors once the statements are read.
//
// The file is read once: a pipe, a FIFO or /dev/stdin works as a regular
// file does (the preprocessor, if one is needed, is given the text read,
// not the path, and resolves #include "..." against the working
// directory).
func Open(path string, opts Options) (*Reader, error) {
	text, regular, err := readText(path)
	if err != nil {
		return nil, fmt.Errorf("read DPDF: %w", err)
	}
	return newReader(path, text, opts, regular)
}

// readText reads a file into a string without a second copy, and says
// whether it is a regular file (which can be read again).
func readText(path string) (string, bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	var b strings.Builder
	regular := false
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		regular = true
		if fi.Size() > 0 && fi.Size() < math.MaxInt32 {
			b.Grow(int(fi.Size()) + 1)
		}
	}
	if _, err := io.Copy(&b, f); err != nil {
		return "", false, err
	}
	return b.String(), regular, nil
}

// OpenSource is Open for DPDF text held in memory, as ParseSource: name
// is what errors call it (a one-liner's "-e", "<stdin>"), and the
// preprocessor resolves #include "..." against the working directory.
func OpenSource(name string, src []byte, opts Options) (*Reader, error) {
	return newReader(name, string(src), opts, false)
}

// OpenFileSource is Open for the text src already read from the regular
// file at path: the file is not read again, except by the preprocessor
// when the text has directives (so that #include "..." resolves beside
// it, as a C compiler does).
func OpenFileSource(path string, src []byte, opts Options) (*Reader, error) {
	return newReader(path, string(src), opts, true)
}

func newReader(path string, text string, opts Options, onDisk bool) (*Reader, error) {
	r := &Reader{Path: path, src: &sources{files: map[string][]string{}, text: map[string]string{path: text}},
		seenHeader: map[string]*KeyValue{}}
	cpp := false
	if hasDirectives(strings.TrimPrefix(text, bom)) && !opts.NoPreprocessor {
		out, deps, err := preprocess(path, text, opts, onDisk)
		if err != nil {
			var l ErrorList
			if errors.As(err, &l) {
				r.src.annotate(l)
				return nil, l
			}
			return nil, err
		}
		text, cpp, r.Deps, r.Preprocessed = out, true, deps, true
	} else {
		r.Deps = []string{path}
	}
	r.text = text
	r.sc = newScanner(path, text, cpp, &r.errs)
	r.src.pp = r.sc.lines
	return r, nil
}

// Next returns the next statement of the file, or false at its end; the
// caller may keep what it returns.
func (r *Reader) Next() (Item, bool) {
	if r.replay != nil {
		return r.replay()
	}
	for r.at >= len(r.batch) {
		if r.scanned {
			r.end()
			return Item{}, false
		}
		r.fill()
	}
	it := r.batch[r.at]
	r.batch[r.at] = Item{} // the batch does not keep what the caller dropped
	r.at++
	return it, true
}

// fill lexes and parses the next batch of statements.
func (r *Reader) fill() {
	toks, done := r.sc.next(batchStatements, batchStatements*6)
	if r.sc.cpp {
		fixColumns(toks, r.src, &r.col)
	}
	stmts := parseStatements(toks, r.text, &r.errs)
	r.batch, r.at = r.batch[:0], 0
	for _, st := range stmts {
		r.place(st)
	}
	if done {
		r.scanned = true
		r.sc = nil
	}
}

// place puts a statement in the file structure (the header, then probes)
// and checks where each keyword stands.
func (r *Reader) place(st *Stmt) {
	if st.KV == nil {
		if r.probes == 0 {
			if !st.broken {
				r.errs.add(st.Pos, "instruction outside a probe: %s", probeStart)
			}
			return
		}
		r.inBody = true
		r.batch = append(r.batch, Item{Stmt: st})
		return
	}
	kv := st.KV
	k := kv.Norm()
	switch {
	case contains(StartKeys, k):
		r.probes++
		r.inBody = false
		r.start = k
		r.seenProbe = map[string]*KeyValue{k: kv}
		r.batch = append(r.batch, Item{Probe: &ProbeDef{Pos: kv.Pos, Offset: kv}})
	case contains(headerKeys, k) && (r.probes == 0 || !contains(probeKeys, k)):
		// a keyword of both (autostacktrace) is the header's before
		// the first probe, the probe's after
		if r.probes > 0 {
			r.errs.add(kv.Pos, "header keyword %q inside a probe: move it before the first probe", kv.Key)
			return
		}
		if prev, dup := r.seenHeader[k]; dup {
			r.errs.add(kv.Pos, "%s given twice (first at line %d)", KeyName(k), prev.Pos.Line)
			return
		}
		r.seenHeader[k] = kv
		r.batch = append(r.batch, Item{Header: kv})
	case contains(probeKeys, k):
		if r.probes == 0 {
			r.errs.add(kv.Pos, "probe keyword %q before the first probe: %s", kv.Key, probeStart)
			return
		}
		if r.inBody {
			r.errs.add(kv.Pos, "probe keyword %q after the program started: put it right after the %s line", kv.Key, r.start)
			return
		}
		if prev, dup := r.seenProbe[k]; dup {
			r.errs.add(kv.Pos, "%s given twice in this probe (first at line %d)", KeyName(k), prev.Pos.Line)
			return
		}
		r.seenProbe[k] = kv
		r.batch = append(r.batch, Item{Key: kv})
	default:
		msg := fmt.Sprintf("unknown keyword %q", kv.Key)
		all := append(append([]string{}, headerKeys...), probeKeys...)
		if s := suggest(k, all); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", KeyName(s))
		}
		r.errs.add(kv.Pos, "%s", msg)
	}
}

// end runs the checks of the whole file, once.
func (r *Reader) end() {
	if r.ended {
		return
	}
	r.ended = true
	if r.probes == 0 && len(r.errs) == 0 {
		r.errs.add(lexer.Position{Filename: r.Path, Line: 1, Column: 1}, "no probes: %s", probeStart)
	}
}

// Errors returns the syntax and structure errors found: every one once
// Next has returned false, unsorted.
func (r *Reader) Errors() ErrorList { return r.errs }

// Finish sorts errs and attaches source lines for caret displays.
func (r *Reader) Finish(errs *ErrorList) {
	errs.Sort()
	r.src.annotate(*errs)
}

// Reader returns a Reader of the parsed file's statements, for code that
// consumes a DPDF statement by statement (compiler.CompileReader): its items
// are f's, its errors f.Errors.
func (f *File) Reader() *Reader {
	r := &Reader{Path: f.Path, Deps: f.Deps, Preprocessed: f.Preprocessed, src: f.src, errs: f.Errors, scanned: true, ended: true}
	h, p, k, b := 0, -1, 0, 0
	r.replay = func() (Item, bool) {
		if h < len(f.Header) {
			h++
			return Item{Header: f.Header[h-1]}, true
		}
		if p >= 0 {
			pd := f.Probes[p]
			if k < len(pd.Keys) {
				k++
				return Item{Key: pd.Keys[k-1]}, true
			}
			if b < len(pd.Body) {
				b++
				return Item{Stmt: pd.Body[b-1]}, true
			}
		}
		if p+1 < len(f.Probes) {
			p, k, b = p+1, 0, 0
			return Item{Probe: f.Probes[p]}, true
		}
		return Item{}, false
	}
	return r
}
