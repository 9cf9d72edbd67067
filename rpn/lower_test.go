package rpn

import (
	"slices"
	"testing"
)

// TestLowering: the analysis Load makes for the code generators, on a
// straight program with a dead instruction and on one with a loop and a
// call.
func TestLowering(t *testing.T) {
	straight := asm(cat(
		OpPushR, 0, 0, // 0 @0
		OpJz, u32(11), // 1 @3: to 3
		OpIncLVI, 0, 0, // 2 @8
		OpJmp, u32(18), // 3 @11: to 5
		OpExit, 1, // 4 @16: dead
		OpLogN, 1, // 5 @18
		OpExit, 1, // 6 @20
	)...)
	p, err := Load(straight)
	if err != nil {
		t.Fatalf("%+v", err)
	}
	l := p.Lowering(0)
	if l.First != 0 || l.N != 7 {
		t.Errorf("first %d n %d, want 0 and 7", l.First, l.N)
	}
	if want := NeedRegs | NeedJump | NeedLV | NeedLog; l.Needs != want {
		t.Errorf("needs %#x, want %#x", l.Needs, want)
	}
	if want := []bool{true, true, true, true, false, true, true}; !slices.Equal(l.Live, want) {
		t.Errorf("live %v, want %v", l.Live, want)
	}
	if want := []int{1, 1, 1, 2, 0, 1, 1}; !slices.Equal(l.Ways, want) {
		t.Errorf("ways %v, want %v", l.Ways, want)
	}
	if want := []bool{true, false, false, true, false, true, false}; !slices.Equal(l.BlockStart, want) {
		t.Errorf("block starts %v, want %v", l.BlockStart, want)
	}
	if l.Cyclic || l.MostJumps != 2 {
		t.Errorf("cyclic %v, most jumps %d; want false and 2 (jz taken, then jmp)", l.Cyclic, l.MostJumps)
	}
	if !l.Stack.Static || l.Stack.NeedZero != 0 || !slices.Equal(l.Stack.Depth[:4], []int{0, 1, 1, 1}) {
		t.Errorf("stack %+v: want static, nothing to zero, depths 0 1 1 1 ...", l.Stack)
	}

	looped := asm(cat(
		OpPushD, make([]byte, 8), // 0 @0
		OpCall, u32(21), // 1 @9: to 4
		OpLoop, u32(9), // 2 @14: to 1
		OpExit, 1, // 3 @19
		OpRet, // 4 @21
	)...)
	looped.Code[1] = 3
	if p, err = Load(looped); err != nil {
		t.Fatalf("%+v", err)
	}
	l = p.Lowering(0)
	if want := NeedJump | NeedCall; l.Needs != want {
		t.Errorf("needs %#x, want %#x", l.Needs, want)
	}
	if want := []int{1, 2, 1, 1, 0}; !slices.Equal(l.Ways, want) {
		t.Errorf("ways %v, want %v (a call's target is not a way in)", l.Ways, want)
	}
	if want := []bool{true, true, true, false, true}; !slices.Equal(l.BlockStart, want) {
		t.Errorf("block starts %v, want %v", l.BlockStart, want)
	}
	if !l.Cyclic || l.MostJumps != -1 {
		t.Errorf("cyclic %v, most jumps %d; want true and -1", l.Cyclic, l.MostJumps)
	}
	if l.Stack.Static || l.Stack.NeedZero != ^uint32(0) {
		t.Errorf("stack %+v: a call makes it dynamic, every slot zeroed", l.Stack)
	}
	if !slices.Equal(l.Live, []bool{true, true, true, true, true}) {
		t.Errorf("live %v: the routine is reached by the call", l.Live)
	}
}
