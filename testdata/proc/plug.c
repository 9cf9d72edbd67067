// A library the fixture dlopens after probes are in: its probes stay
// pending until it is mapped.
#include <string.h>
long plug(long i, const char *s) { return i + (long)strlen(s) * 100; }
