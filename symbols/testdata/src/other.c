/* Test fixture: a second compile unit. */
#include "fixture.h"

static int counter = 5;           /* static twin of main.c's global */
struct opaque *opaque_ptr;
union number num;
enum colour col = BLUE;
long long big;
unsigned char small;

static int helper(int x)          /* same name as main.c's helper */
{
	return x - counter;
}

__attribute__((noinline)) int caller_two(int x)
{
	return bump(x) * 2;
}

int other_entry(int x)
{
	layout_t l = {0};
	clayout_t *p = &l;

	l.pid = x;
	return helper(x) + p->pid + num.i + col + (int)big + small; /* L:other_return */
}
