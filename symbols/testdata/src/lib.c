/* Test fixture: a shared library with versioned symbols. */
int lib_value = 42;

int lib_func_v1(int x)
{
	return x;
}

int lib_func_v2(int x)
{
	return x * 2;
}

__asm__(".symver lib_func_v1, lib_func@VERS_1");
__asm__(".symver lib_func_v2, lib_func@@VERS_2");

int lib_plain(int x)
{
	return x + lib_value;
}
