/* Test fixture: fs/open.c, to be told apart from xfs/open.c. */
int fs_open(int x)
{
	return x + 10; /* L:fs_open */
}
