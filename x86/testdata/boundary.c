// Functions for the CheckBoundary oracle test: compiled with gcc (64- and
// 32-bit objects, with -fcf-protection) and compared against objdump -d.
// They cover the code shapes compilers emit: prologues, switch tables,
// loops, string operations, floating point, vector code, long immediates.

typedef unsigned long size_t;

struct node {
	struct node *next;
	long key;
	char name[24];
};

long lookup(struct node *n, long key) {
	for (; n; n = n->next) {
		if (n->key == key) {
			return n->name[0];
		}
	}
	return -1;
}

int classify(int c) {
	switch (c) {
	case 0:
		return 11;
	case 1:
		return 23;
	case 2:
		return 37;
	case 3:
		return 41;
	case 4:
		return 53;
	case 5:
		return 67;
	case 6:
		return 71;
	case 7:
		return 89;
	}
	return -1;
}

void copy(char *d, const char *s, size_t n) {
	while (n--) {
		*d++ = *s++;
	}
}

double poly(double x, const double *c, int n) {
	double r = 0;
	for (int i = n - 1; i >= 0; i--) {
		r = r * x + c[i];
	}
	return r;
}

long long big(long long x) {
	return x * 0x123456789abcdefLL + 0x7edcba9876543210LL;
}

static int counter;

int bump(int by) {
	counter += by;
	return counter;
}

float dot(const float *a, const float *b, int n) {
	float s = 0;
	for (int i = 0; i < n; i++) {
		s += a[i] * b[i];
	}
	return s;
}

int many(int a, int b, int c, int d, int e, int f, int g, int h) {
	int buf[64];
	for (int i = 0; i < 64; i++) {
		buf[i] = a * i + b;
	}
	return buf[c & 63] + buf[d & 63] + e + f + g + h;
}

unsigned char bits(unsigned x) {
	return __builtin_popcount(x) + __builtin_ctz(x | 1) + (x >> 3 & 1);
}

void fill(char *p, int c, size_t n) {
	__builtin_memset(p, c, n);
}
