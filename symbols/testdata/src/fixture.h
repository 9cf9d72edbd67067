/* Types and an always-inline function shared by the test fixture programs. */
#ifndef FIXTURE_H
#define FIXTURE_H

typedef int pid_like_t;
typedef unsigned long ulong_t;

struct inner {
	short tag;
	long value;
};

struct layout {
	char c;
	struct hdr {              /* nested struct definition */
		int id;
		char name[12];
	} hdr;
	struct inner in[3];       /* array of structs */
	union {                   /* anonymous union */
		int as_int;
		struct {          /* anonymous struct in the anonymous union */
			short lo, hi;
		};
	};
	unsigned int flag_a : 3;  /* bit-fields */
	unsigned int flag_b : 5;
	pid_like_t pid;           /* typedef */
	struct layout *next;      /* pointer */
	int grid[2][3];           /* two dimensions */
	const volatile ulong_t cv;
	char tail[];              /* flexible array member */
};

union number {
	int i;
	double d;
	char bytes[8];
};

enum colour { RED, GREEN, BLUE = 300 };

typedef struct layout layout_t;
typedef const layout_t clayout_t;

struct opaque;                    /* declared, never defined */
extern struct opaque *opaque_ptr;

static inline __attribute__((always_inline)) int bump(int x)
{
	x += 2; /* L:inlined */
	return x * 5;
}

int caller_one(int x);
int caller_two(int x);
int other_entry(int x);
int fs_open(int x);
int xfs_open(int x);

#endif
