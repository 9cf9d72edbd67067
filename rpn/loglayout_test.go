package rpn_test

import (
	"testing"

	"github.com/gprobes/gprobes/rpn"
)

// The log layouts of a program are found from its code: a straight
// program's one sequence, both ways of a branch, a subroutine's logs,
// none for a path that commits nothing; no layout for a program that
// rewinds its log or logs in a loop.
func TestLogLayouts(t *testing.T) {
	m := compile(t, `name = ./a.out
modtype = user
vars = 3
offset = a
push r,rdi
log 1
push d,16
push r,rsi
log str
exit 1
offset = b
push r,rdi
jz none
call two
push d,4
push r,rsi
log mrf
exit 2
none:
log 1
exit 1
two:
push d,1
push d,2
log 2
ret
offset = c
push lp
log 1
pop lp
exit 1
offset = d
push d,3
again:
push d,7
log 1
loop again
exit 1
offset = e
log lv,0,3
exit 0
`).Module()
	want := []string{"w8 s", "w8 w8 m|w8", "", "", ""}
	for i, w := range want {
		if got := rpn.FormatLayouts(rpn.LogLayouts(m, i)); got != w {
			t.Errorf("probe %d: layouts %q, want %q", i, got, w)
		}
	}
	ls, err := rpn.ParseLayouts("w8 w8 m|w8")
	if err != nil || rpn.FormatLayouts(ls) != "w8 w8 m|w8" {
		t.Fatalf("parse: %v %v", ls, err)
	}
	// a record is cut by the layout it fits
	data := []byte{1, 0, 0, 0, 0, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 'g', 'p'}
	vals, ok := rpn.Split(ls, data)
	if !ok || len(vals) != 3 || vals[0].String() != "1" || vals[1].String() != "-2" || vals[2].String() != `"gp"` {
		t.Errorf("split: %v %v", vals, ok)
	}
	if vals, ok := rpn.Split(ls, data[:8]); !ok || len(vals) != 1 {
		t.Errorf("split of one word: %v %v", vals, ok)
	}
	addr := []byte{0x40, 0x33, 0x4a, 0x34, 0xe1, 0x7f, 0, 0}
	if vals, ok := rpn.Split(ls, addr); !ok || vals[0].String() != "0x7fe1344a3340" {
		t.Errorf("an address: %v", vals)
	}
	// memory that is not text stays hex; a cut that fits no layout is not made
	if vals, _ := rpn.Split(ls, append(data[:16:16], 0x01, 0x80)); vals[2].String() != "0x0180" {
		t.Errorf("binary memory: %v", vals)
	}
	if _, ok := rpn.Split(ls, data[:5]); ok {
		t.Error("5 bytes cut by layouts of words")
	}
	// two readings of one record: none
	two, _ := rpn.ParseLayouts("w8 s|s w8")
	if _, ok := rpn.Split(two, data); ok {
		t.Error("a record that two layouts cut differently was cut")
	}
}
