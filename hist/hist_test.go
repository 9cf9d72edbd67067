package hist

import (
	"math"
	"strings"
	"testing"
)

func TestIndexAndLabel(t *testing.T) {
	for _, c := range []struct {
		v     int64
		label string
	}{
		{-1, "(..., 0)"}, {math.MinInt64, "(..., 0)"},
		{0, "[0]"}, {1, "[1]"},
		{2, "[2, 4)"}, {3, "[2, 4)"}, {4, "[4, 8)"},
		{1023, "[512, 1K)"}, {1024, "[1K, 2K)"}, {2047, "[1K, 2K)"},
		{1 << 20, "[1M, 2M)"}, {1<<30 + 5, "[1G, 2G)"}, {1 << 40, "[1T, 2T)"}, {1 << 50, "[1P, 2P)"},
		{1 << 60, "[1E, 2E)"}, {1 << 62, "[4E, 8E)"}, {math.MaxInt64, "[4E, 8E)"},
	} {
		if got := Label(Index(c.v)); got != c.label {
			t.Errorf("%d: %s, want %s", c.v, got, c.label)
		}
	}
}

// The rows bpftrace prints for the same values: its layout, the empty
// buckets between the first and the last, bars truncated as float.
func TestWrite(t *testing.T) {
	var s Set
	for _, v := range []int64{-5, 0, 1, 1, 2, 3, 1023, 1024, 1500, 2047, 2048} {
		s.Add("pid:1, m, 2, retprobe write", v)
	}
	s.Add("pid:1, m, 1, read", 7)
	var sb strings.Builder
	if err := s.Write(&sb); err != nil {
		t.Fatal(err)
	}
	want := `@[pid:1, m, 1, read]: 
[4, 8)                 1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|

@[pid:1, m, 2, retprobe write]: 
(..., 0)               1 |@@@@@@@@@@@@@@@@@                                   |
[0]                    1 |@@@@@@@@@@@@@@@@@                                   |
[1]                    2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@                  |
[2, 4)                 2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@                  |
[4, 8)                 0 |                                                    |
[8, 16)                0 |                                                    |
[16, 32)               0 |                                                    |
[32, 64)               0 |                                                    |
[64, 128)              0 |                                                    |
[128, 256)             0 |                                                    |
[256, 512)             0 |                                                    |
[512, 1K)              1 |@@@@@@@@@@@@@@@@@                                   |
[1K, 2K)               3 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
[2K, 4K)               1 |@@@@@@@@@@@@@@@@@                                   |

`
	if got := sb.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	var empty Set
	sb.Reset()
	empty.Write(&sb)
	if sb.Len() != 0 {
		t.Errorf("an empty set printed %q", sb.String())
	}
}
