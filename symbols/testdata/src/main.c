/* Test fixture: the main program. Lines marked L:name are looked up by the tests. */
#include <stdio.h>
#include "fixture.h"

int counter = 1;                  /* global; other.c has a static twin */
struct layout global_layout;

__attribute__((weak)) int weak_hook(void)
{
	return 7;
}

static int impl_fast(int x)
{
	return x + 1;
}

static int (*resolve_fast(void))(int)
{
	return impl_fast;
}

int fast(int) __attribute__((ifunc("resolve_fast")));

static int helper(int x)          /* other.c has a static helper too */
{
	return x * 3; /* L:helper_main */
}

__attribute__((noinline)) int caller_one(int x)
{
	return bump(x) + helper(x); /* L:caller_one */
}

int main(int argc, char **argv)
{
	int v = argc; /* L:main_first */

	/* L:nocode: a comment, then a blank line */

	v = caller_one(v); /* L:after_nocode */
	v += caller_two(v);
	v += other_entry(v);
	v += fast(v);
	v += fs_open(v) + xfs_open(v);
	printf("%d %d %s\n", v, global_layout.hdr.id, argv[0]); /* L:printf */
	return weak_hook() + counter;
}
