/* Test fixture: xfs/open.c, to be told apart from fs/open.c. */
int xfs_open(int x)
{
	return x + 20; /* L:xfs_open */
}
