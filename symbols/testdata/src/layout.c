/* Test fixture: prints sizeof and offsetof as the C compiler sees them, the
 * oracle for Sizeof and Offsetof. */
#include <stddef.h>
#include <stdio.h>
#include "fixture.h"

#define S(T) printf("sizeof|%s|%zu\n", #T, sizeof(T));
#define O(T, F) printf("offsetof|%s|%s|%zu\n", #T, #F, offsetof(T, F));
/* field: the offset and the size of the member's type (Set.Field). */
#define F(T, F) printf("field|%s|%s|%zu|%zu\n", #T, #F, offsetof(T, F), sizeof(((T *)0)->F));

int main(void)
{
	S(struct layout) S(struct hdr) S(struct inner) S(union number)
	S(enum colour) S(pid_like_t) S(ulong_t) S(layout_t) S(clayout_t)
	S(int) S(unsigned long) S(long unsigned int) S(char) S(short)
	S(long long) S(unsigned char) S(double) S(struct layout *)
	S(struct opaque *) S(const struct inner)

	O(struct layout, c) O(struct layout, hdr) O(struct layout, hdr.id)
	O(struct layout, hdr.name[5]) O(struct layout, in) O(struct layout, in[2])
	O(struct layout, in[2].value) O(struct layout, as_int) O(struct layout, lo)
	O(struct layout, hi) O(struct layout, pid) O(struct layout, next)
	O(struct layout, grid) O(struct layout, grid[1]) O(struct layout, grid[1][2])
	O(struct layout, cv) O(struct layout, tail) O(struct layout, tail[4])
	O(layout_t, pid) O(clayout_t, in[1].tag) O(union number, bytes[3])
	O(struct hdr, name) O(struct inner, value)

	F(struct layout, c) F(struct layout, hdr) F(struct layout, hdr.id)
	F(struct layout, hdr.name) F(struct layout, hdr.name[5]) F(struct layout, in)
	F(struct layout, in[2]) F(struct layout, in[2].value) F(struct layout, as_int)
	F(struct layout, lo) F(struct layout, hi) F(struct layout, pid)
	F(struct layout, next) F(struct layout, grid) F(struct layout, grid[1])
	F(struct layout, grid[1][2]) F(struct layout, cv) F(struct layout, tail[4])
	F(layout_t, pid) F(clayout_t, in[1].tag) F(union number, d)
	F(union number, bytes) F(union number, bytes[3]) F(struct inner, value)
	return 0;
}
