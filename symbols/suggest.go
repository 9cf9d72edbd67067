package symbols

import (
	"slices"
	"strings"
)

// maxSuggestions is how many close names a NotFoundError offers.
const maxSuggestions = 3

// suggester collects the names closest to a misspelt one. A name qualifies
// when its edit distance (with transpositions: "frok" is one edit from "fork")
// is small for the query's length, or when one name is a prefix of the other.
type suggester struct {
	query string
	limit int // largest distance accepted; -1 to accept any (fields)
	best  []scored
	row   [3][]int // scratch rows for osa
}

type scored struct {
	name string
	dist int
}

func newSuggester(query string, any bool) *suggester {
	s := &suggester{query: query, limit: 1 + len(query)/5}
	if s.limit > 3 {
		s.limit = 3
	}
	if any {
		s.limit = -1
	}
	return s
}

// add considers one candidate name.
func (s *suggester) add(name string) {
	if name == s.query || name == "" {
		return
	}
	limit := s.limit
	if limit < 0 {
		limit = len(name) + len(s.query)
	}
	// Keep only as many as needed: a candidate must beat the current worst.
	if len(s.best) == maxSuggestions {
		if w := s.best[len(s.best)-1].dist; w < limit {
			limit = w
		}
	}
	d := -1
	if diff := len(name) - len(s.query); diff <= limit && -diff <= limit {
		d = s.osa(name, limit)
	}
	if d < 0 && s.limit >= 0 && len(s.query) >= 3 &&
		(strings.HasPrefix(name, s.query) || strings.HasPrefix(s.query, name) && len(name) >= 3) {
		// Prefix matches rank after every edit-distance match.
		d = s.limit + 1 + abs(len(name)-len(s.query))
	}
	if d < 0 {
		return
	}
	i, _ := slices.BinarySearchFunc(s.best, scored{name, d}, func(a, b scored) int {
		if a.dist != b.dist {
			return a.dist - b.dist
		}
		return strings.Compare(a.name, b.name)
	})
	if i < len(s.best) && s.best[i].name == name {
		return
	}
	if i >= maxSuggestions {
		return
	}
	s.best = slices.Insert(s.best, i, scored{name, d})
	if len(s.best) > maxSuggestions {
		s.best = s.best[:maxSuggestions]
	}
}

func (s *suggester) names() []string {
	out := make([]string, len(s.best))
	for i, b := range s.best {
		out[i] = b.name
	}
	return out
}

// osa is the optimal string alignment distance between s.query and b, or -1
// when it exceeds limit.
func (s *suggester) osa(b string, limit int) int {
	a := s.query
	n := len(b) + 1
	for i := range s.row {
		if cap(s.row[i]) < n {
			s.row[i] = make([]int, n)
		}
		s.row[i] = s.row[i][:n]
	}
	prev2, prev, cur := s.row[0], s.row[1], s.row[2]
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		rowMin := i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			v := min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				v = min(v, prev2[j-2]+1)
			}
			cur[j] = v
			rowMin = min(rowMin, v)
		}
		if rowMin > limit {
			return -1
		}
		prev2, prev, cur = prev, cur, prev2
	}
	if d := prev[len(b)]; d <= limit {
		return d
	}
	return -1
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
