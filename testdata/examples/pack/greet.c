/* libgreet.so, the vendor's library, in two builds: VARIANT 2 has a
   function before greet, so greet is at another address, and its build
   ID differs. */
#include <stdio.h>

#if VARIANT == 2
int greet_twice(int n)
{
	volatile int s = 0;
	for (int i = 0; i < n; i++)
		s += i * n;
	return s;
}
#endif

int greet(int n)
{
	printf("hello %d from variant %d\n", n, VARIANT);
	return 2 * n;
}
