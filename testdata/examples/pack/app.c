/* The vendor's program: greet(1) .. greet(N), N from its argument. */
#include <stdio.h>
#include <stdlib.h>

int greet(int n);

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3, sum = 0;
	for (int i = 1; i <= n; i++)
		sum += greet(i);
	printf("sum %d\n", sum);
	return 0;
}
