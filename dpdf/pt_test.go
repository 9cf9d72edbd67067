package dpdf
import ("testing";"fmt";"os")
func TestScratch(t *testing.T) {
	src := `name = "/lib/libc.so.6"
modtype = user
major = 1
jmpmax = 32 // hi
Pass Count = 3
offset = malloc+0x10
opcode = 0x55
minor = 1
pass count = 0
push r,rdi
push d,0x20000000 * (2+3) - sizeof(struct task_struct) + offsetof(struct a, b.c[3].d)
sub ; jz take_dump
exit
take_dump: exit 3
loop:
PUSH D, 'a'
pusj d,3
push q,4
log lv,3
offset = fs/open.c:1234
push r,rsp ; push d,16 ; log mrf
exit @
foo = 3
push d,
push d,3 3
`
	f, err := ParseSource("t.dpdf", []byte(src), Options{})
	if err != nil { PrintError(os.Stdout, err, true) }
	if f != nil { for _, p := range f.Probes { fmt.Println(p.Offset.Value.Text, len(p.Body)) } }
}
