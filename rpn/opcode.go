package rpn

// Opcode is one instruction of the RPN machine. The bytecode is the opcode
// byte followed by its operands, little-endian, as given by the operand
// format in opInfo. Stack pictures read "before OP after", TOS rightmost.
// Binary operators pop X (the TOS), then Y, and push Y op X.
//
// The numbering is part of the PPDF format: append new opcodes, never
// renumber, and bump ppdf.Version if an existing encoding changes.
type Opcode uint8

const (
	OpInvalid Opcode = iota //                    (never emitted; rejected by the verifier)
	OpNop                   // -  NOP  -
	OpJmp                   // -  JMP L  -                         (taken jump)
	OpJz                    // x  JZ L  x                          jump if x == 0
	OpJnz                   // x  JNZ L  x                         jump if x != 0
	OpJlt                   // x  JLT L  x                         jump if signed x < 0
	OpJle                   // x  JLE L  x                         jump if signed x <= 0
	OpJgt                   // x  JGT L  x                         jump if signed x > 0
	OpJge                   // x  JGE L  x                         jump if signed x >= 0
	OpLoop                  // x  LOOP L  x-1                      jump if x-1 != 0
	OpCall                  // -  CALL L  -                        push return address on the call stack
	OpRet                   // -  RET  -
	OpExit                  // -  EXIT n  -                        end; facility n (0 commits nothing)
	OpAbort                 // -  ABORT  -                         end; log discarded
	OpRem                   // -  REM  -                           end; log committed (facility 1); probe disabled

	OpLogN   // w1..wn  LOG n  -                   words in push order, little-endian
	OpLogStr // len addr  LOG STR  -               bytes up to (not including) NUL, at most len
	OpLogMrf // len addr  LOG MRF  -               len raw bytes
	OpLogLV  // -  LOG LV,i,n  -
	OpLogGV  // -  LOG GV,i,n  -
	OpSetMajI
	OpSetMinI
	OpSetMaj // m  SETMAJ  -
	OpSetMin // m  SETMIN  -
	OpPushLP // -  PUSH LP  len
	OpPopLP  // len  POP LP  -                     rewind; len > current length is invalid-operand

	OpPushLVI // -  PUSH LV,i  lv[i]
	OpPopLVI  // x  POP LV,i  -                    lv[i] = x
	OpMoveLVI // x  MOVE LV,i  x                   lv[i] = x
	OpIncLVI  // -  INC LV,i  -
	OpDecLVI  // -  DEC LV,i  -
	OpPushLV  // i  PUSH LV  lv[i]
	OpPopLV   // i x  POP LV  -                    lv[i] = x
	OpMoveLV  // x i  MOVE LV  x                   lv[i] = x
	OpIncLV   // i  INC LV  -
	OpDecLV   // i  DEC LV  -
	OpPushGVI
	OpPopGVI
	OpMoveGVI
	OpIncGVI
	OpDecGVI
	OpPushGV
	OpPopGV
	OpMoveGV
	OpIncGV
	OpDecGV

	OpAdd  // y x  ADD  y+x
	OpSub  // y x  SUB  y-x
	OpMul  // y x  MUL  y*x
	OpDiv  // y x  DIV  y%x y/x                    unsigned; x == 0 is divide-by-zero
	OpIDiv // y x  IDIV  y%x y/x                   signed
	OpAnd  // y x  AND  y&x
	OpOr   // y x  OR  y|x
	OpXor  // y x  XOR  y^x
	OpNot  // x  NOT  ^x
	OpNeg  // x  NEG  -x
	OpShlI // x  SHL n  x<<n
	OpShrI // x  SHR n  x>>n                       logical
	OpSarI // x  SAR n  x>>n                       arithmetic
	OpRolI // x  ROL n  rotl(x,n)
	OpRorI // x  ROR n  rotr(x,n)
	OpShl  // y n  SHL  y<<n
	OpShr  // y n  SHR  y>>n
	OpSar  // y n  SAR  y>>n
	OpRol  // y n  ROL  rotl(y,n)
	OpRor  // y n  ROR  rotr(y,n)

	OpVfyR  // a  VFY_R  0|1                        0 if one byte at a can be read
	OpVfyRW // a  VFY_RW  0|1                       0 if one byte at a can be read and written

	OpPop  // x  POP  -
	OpDup  // x  DUP  x x
	OpXchg // y x  XCHG  x y
	OpRos  // x1..xn  ROS n  -

	OpPushR // -  PUSH R,reg  v
	OpPopR  // v  POP R,reg  -
	OpPushU // -  PUSH U,reg  v                    user-mode register of the current task
	OpPopU  // v  POP U,reg  -

	OpPushD   // -  PUSH D,imm  imm
	OpPushMrf // a  PUSH MRF,size  mem[a]
	OpPopMrf  // a v  POP MRF,size  -              mem[a] = v

	OpPushPID    // -  PUSH PID  pid
	OpPushTID    // -  PUSH TID  tid
	OpPushProcID // -  PUSH PROCID  cpu
	OpPushTask   // -  PUSH TASK  current
	OpPushTS     // -  PUSH TS  ns

	OpPushIO // port  PUSH IO,size  v
	OpPopIO  // port v  POP IO,size  -

	OpPushField // -  PUSH FIELD,i  v                   field Module.Fields[i] of the tracepoint event (FieldEnv); tracepoint probes only

	OpEnable  // -  ENABLE minor  -                 switch on every probe of the module with that minor (Switcher)
	OpDisable // -  DISABLE minor  -                switch them off
	OpPushIV  // -  PUSH IV,i  v                    instance variable i (0..MaxIV-1) of this call (IVEnv)
	OpPopIV   // v  POP IV,i  -

	OpLogUStack // -  LOG USTACK,n  -                 n return addresses of the user stack at the hit, zero-padded (StackEnv)
	OpLogKStack // -  LOG KSTACK,n  -                 the same of the kernel stack

	OpPushArg // -  PUSH ARG,n  v                    argument n (1..MaxUSDTArgs) of the usdt probe, as its note says where it is (ArgEnv); usdt probes only

	numOpcodes
)

// Operand formats. The operands follow the opcode byte in this order.
type format uint8

const (
	fmtNone   format = iota
	fmtTarget        // u32 absolute byte offset in the module's code
	fmtU8            // exit facility, word count, shift count, size
	fmtU16           // variable index, register, major/minor
	fmtU16U16        // variable index, count
	fmtU64           // immediate
)

// size of the operands of each format, in bytes.
var formatSize = [...]int{fmtNone: 0, fmtTarget: 4, fmtU8: 1, fmtU16: 2, fmtU16U16: 4, fmtU64: 8}

type opInfo struct {
	name   string // mnemonic as printed by the disassembler
	format format
	pops   int8 // words popped, -1 when it depends on an operand
	pushes int8 // words pushed
}

var opTable = [numOpcodes]opInfo{
	OpInvalid: {"(invalid)", fmtNone, 0, 0},
	OpNop:     {"nop", fmtNone, 0, 0},
	OpJmp:     {"jmp", fmtTarget, 0, 0},
	OpJz:      {"jz", fmtTarget, 0, 0},
	OpJnz:     {"jnz", fmtTarget, 0, 0},
	OpJlt:     {"jlt", fmtTarget, 0, 0},
	OpJle:     {"jle", fmtTarget, 0, 0},
	OpJgt:     {"jgt", fmtTarget, 0, 0},
	OpJge:     {"jge", fmtTarget, 0, 0},
	OpLoop:    {"loop", fmtTarget, 0, 0},
	OpCall:    {"call", fmtTarget, 0, 0},
	OpRet:     {"ret", fmtNone, 0, 0},
	OpExit:    {"exit", fmtU8, 0, 0},
	OpAbort:   {"abort", fmtNone, 0, 0},
	OpRem:     {"rem", fmtNone, 0, 0},

	OpLogN:    {"log", fmtU8, -1, 0},
	OpLogStr:  {"log str", fmtNone, 2, 0},
	OpLogMrf:  {"log mrf", fmtNone, 2, 0},
	OpLogLV:   {"log lv", fmtU16U16, 0, 0},
	OpLogGV:   {"log gv", fmtU16U16, 0, 0},
	OpSetMajI: {"setmaj", fmtU16, 0, 0},
	OpSetMinI: {"setmin", fmtU16, 0, 0},
	OpSetMaj:  {"setmaj", fmtNone, 1, 0},
	OpSetMin:  {"setmin", fmtNone, 1, 0},
	OpPushLP:  {"push lp", fmtNone, 0, 1},
	OpPopLP:   {"pop lp", fmtNone, 1, 0},

	OpPushLVI: {"push lv", fmtU16, 0, 1},
	OpPopLVI:  {"pop lv", fmtU16, 1, 0},
	OpMoveLVI: {"move lv", fmtU16, 0, 0},
	OpIncLVI:  {"inc lv", fmtU16, 0, 0},
	OpDecLVI:  {"dec lv", fmtU16, 0, 0},
	OpPushLV:  {"push lv", fmtNone, 1, 1},
	OpPopLV:   {"pop lv", fmtNone, 2, 0},
	OpMoveLV:  {"move lv", fmtNone, 1, 0},
	OpIncLV:   {"inc lv", fmtNone, 1, 0},
	OpDecLV:   {"dec lv", fmtNone, 1, 0},
	OpPushGVI: {"push gv", fmtU16, 0, 1},
	OpPopGVI:  {"pop gv", fmtU16, 1, 0},
	OpMoveGVI: {"move gv", fmtU16, 0, 0},
	OpIncGVI:  {"inc gv", fmtU16, 0, 0},
	OpDecGVI:  {"dec gv", fmtU16, 0, 0},
	OpPushGV:  {"push gv", fmtNone, 1, 1},
	OpPopGV:   {"pop gv", fmtNone, 2, 0},
	OpMoveGV:  {"move gv", fmtNone, 1, 0},
	OpIncGV:   {"inc gv", fmtNone, 1, 0},
	OpDecGV:   {"dec gv", fmtNone, 1, 0},

	OpAdd:  {"add", fmtNone, 2, 1},
	OpSub:  {"sub", fmtNone, 2, 1},
	OpMul:  {"mul", fmtNone, 2, 1},
	OpDiv:  {"div", fmtNone, 2, 2},
	OpIDiv: {"idiv", fmtNone, 2, 2},
	OpAnd:  {"and", fmtNone, 2, 1},
	OpOr:   {"or", fmtNone, 2, 1},
	OpXor:  {"xor", fmtNone, 2, 1},
	OpNot:  {"not", fmtNone, 1, 1},
	OpNeg:  {"neg", fmtNone, 1, 1},
	OpShlI: {"shl", fmtU8, 1, 1},
	OpShrI: {"shr", fmtU8, 1, 1},
	OpSarI: {"sar", fmtU8, 1, 1},
	OpRolI: {"rol", fmtU8, 1, 1},
	OpRorI: {"ror", fmtU8, 1, 1},
	OpShl:  {"shl", fmtNone, 2, 1},
	OpShr:  {"shr", fmtNone, 2, 1},
	OpSar:  {"sar", fmtNone, 2, 1},
	OpRol:  {"rol", fmtNone, 2, 1},
	OpRor:  {"ror", fmtNone, 2, 1},

	OpVfyR:  {"vfy_r", fmtNone, 1, 1},
	OpVfyRW: {"vfy_rw", fmtNone, 1, 1},

	OpPop:  {"pop", fmtNone, 1, 0},
	OpDup:  {"dup", fmtNone, 1, 2},
	OpXchg: {"xchg", fmtNone, 2, 2},
	OpRos:  {"ros", fmtU8, -1, 0},

	OpPushR: {"push r", fmtU16, 0, 1},
	OpPopR:  {"pop r", fmtU16, 1, 0},
	OpPushU: {"push u", fmtU16, 0, 1},
	OpPopU:  {"pop u", fmtU16, 1, 0},

	OpPushD:   {"push d", fmtU64, 0, 1},
	OpPushMrf: {"push mrf", fmtU8, 1, 1},
	OpPopMrf:  {"pop mrf", fmtU8, 2, 0},

	OpPushPID:    {"push pid", fmtNone, 0, 1},
	OpPushTID:    {"push tid", fmtNone, 0, 1},
	OpPushProcID: {"push procid", fmtNone, 0, 1},
	OpPushTask:   {"push task", fmtNone, 0, 1},
	OpPushTS:     {"push ts", fmtNone, 0, 1},

	OpPushIO: {"push io", fmtU8, 1, 1},
	OpPopIO:  {"pop io", fmtU8, 2, 0},

	OpPushField: {"push field", fmtU16, 0, 1},

	OpEnable:  {"enable", fmtU16, 0, 0},
	OpDisable: {"disable", fmtU16, 0, 0},
	OpPushIV:  {"push iv", fmtU8, 0, 1},
	OpPopIV:   {"pop iv", fmtU8, 1, 0},

	OpLogUStack: {"log ustack", fmtU8, 0, 0},
	OpLogKStack: {"log kstack", fmtU8, 0, 0},

	OpPushArg: {"push arg", fmtU8, 0, 1},
}

// String returns the mnemonic of op.
func (op Opcode) String() string {
	if op < numOpcodes && opTable[op].name != "" {
		return opTable[op].name
	}
	return "(invalid)"
}

// Len is the encoded length of an instruction with this opcode, or 0 for
// an opcode the machine does not know.
func (op Opcode) Len() int {
	if op == OpInvalid || op >= numOpcodes {
		return 0
	}
	return 1 + formatSize[opTable[op].format]
}

// IsJump reports whether op carries a jump target.
func (op Opcode) IsJump() bool { return op < numOpcodes && opTable[op].format == fmtTarget }

// ends reports whether control never falls through to the next instruction.
func (op Opcode) ends() bool {
	switch op {
	case OpJmp, OpRet, OpExit, OpAbort, OpRem:
		return true
	}
	return false
}

// System values read by the PUSH PID ... PUSH TS instructions.
type SysValue uint8

const (
	SysPID    SysValue = iota // process (thread group) id of the current task
	SysTID                    // thread id
	SysProcID                 // CPU, vCPU or thread index
	SysTask                   // address of the current task structure (kernel targets)
	SysTS                     // nanosecond timestamp of the hit
	numSysValues
)

var sysNames = [numSysValues]string{"pid", "tid", "procid", "task", "ts"}

func (s SysValue) String() string {
	if s < numSysValues {
		return sysNames[s]
	}
	return "(invalid)"
}
