package jit

import "github.com/gprobes/gprobes/rpn"

// FrameSlots is the number of 8-byte slots of the register frame at rbp:
// rpn.RegRAX ... rpn.RegRFLAGS.
const FrameSlots = int(rpn.RegRFLAGS) + 1

// ScratchSize is the size in bytes of a hit's scratch area (rbx) for a
// module's logmax, 16-byte rounded: the header, the log (logmax bytes,
// rounded up to 8), then the compiled code's own state, the RPN machine's
// 32-entry stack (StackOffset).
func ScratchSize(logmax int) int {
	return (StackOffset(logmax) + rpn.StackSize*8 + 15) &^ 15
}

// StackOffset is where the RPN stack starts in the scratch area.
func StackOffset(logmax int) int { return OffLog + (logmax+7)&^7 }
