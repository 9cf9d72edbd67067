package hist

import (
	"cmp"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// Buckets is the number of buckets: (..., 0), [0], [1], then one for each
// power of two from [2, 4) to [4E, 8E).
const Buckets = 65

// barWidth is bpftrace's max_width.
const barWidth = 52

// Index is the bucket of v.
func Index(v int64) int {
	switch {
	case v < 0:
		return 0
	case v == 0:
		return 1
	}
	return bits.Len64(uint64(v)) + 1
}

// Hist counts values in log2 buckets.
type Hist struct {
	Counts [Buckets]uint64
	Total  uint64
}

// Add counts one value.
func (h *Hist) Add(v int64) {
	h.Counts[Index(v)]++
	h.Total++
}

// Label is the row label of bucket i: "(..., 0)", "[0]", "[1]", "[2, 4)",
// "[1K, 2K)" ...
func Label(i int) string {
	switch {
	case i == 0:
		return "(..., 0)"
	case i <= 2:
		return "[" + strconv.Itoa(i-1) + "]"
	}
	return "[" + bound(i-1) + ", " + bound(i) + ")"
}

// bound is the low end of bucket i ≥ 2: 2^(i-1), with a suffix for each
// power of 1024 ("1K", "512M", "8E").
func bound(i int) string {
	power := i - 1
	decade := power / 10
	s := strconv.FormatUint(1<<(power-10*decade), 10)
	if decade > 0 {
		s += string("KMGTPE"[decade-1])
	}
	return s
}

// Write prints the histogram's rows, from the first bucket with a count
// to the last, as bpftrace does: the label left-aligned in 16 columns, the
// count right-aligned in 8, " |", the bar, "|". Nothing for an empty
// histogram.
func (h *Hist) Write(w io.Writer) error {
	lo, hi := -1, -1
	var top uint64
	for i, c := range h.Counts {
		if c > 0 {
			if lo < 0 {
				lo = i
			}
			hi = i
		}
		top = max(top, c)
	}
	if lo < 0 {
		return nil
	}
	var sb strings.Builder
	for i := lo; i <= hi; i++ {
		c := h.Counts[i]
		// bpftrace: value / (float)max_value * max_width, in float,
		// truncated
		n := int(float32(c) / float32(top) * barWidth)
		fmt.Fprintf(&sb, "%-16s%8d |%-52s|\n", Label(i), c, strings.Repeat("@", n))
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

// Set is one histogram per key (per probe), printed in bpftrace's order of
// a map of histograms: by total count, the largest last; equal totals in
// order of their keys.
type Set struct {
	Name string // the map's name after @ (empty: "@")
	m    map[string]*Hist
}

// Add counts one value under key.
func (s *Set) Add(key string, v int64) {
	if s.m == nil {
		s.m = map[string]*Hist{}
	}
	h := s.m[key]
	if h == nil {
		h = &Hist{}
		s.m[key] = h
	}
	h.Add(v)
}

// Len is the number of keys.
func (s *Set) Len() int { return len(s.m) }

// Write prints each key's histogram under "@NAME[KEY]: ", a blank line
// between two, and a blank line at the end, as bpftrace prints a map of
// histograms when it exits.
func (s *Set) Write(w io.Writer) error {
	if len(s.m) == 0 {
		return nil
	}
	keys := make([]string, 0, len(s.m))
	for k := range s.m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		return cmp.Or(cmp.Compare(s.m[a].Total, s.m[b].Total), strings.Compare(a, b))
	})
	for i, k := range keys {
		if i > 0 {
			if _, err := io.WriteString(w, "\n"); err != nil {
				return err
			}
		}
		if _, err := fmt.Fprintf(w, "@%s[%s]: \n", s.Name, k); err != nil {
			return err
		}
		if err := s.m[k].Write(w); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, "\n")
	return err
}
