/* Preloaded after libshim (LD_PRELOAD="libshim.so shm_spy.so"): reports every POSIX
 * shared-memory object created with a name of libshim's ("/shim-..."), on stderr as
 * "shm_spy: created /shim-...". A ghost window's memory used to be such an object, named in
 * /dev/shm from its creation until every process of the node had mapped it, so a rank killed
 * in between left it behind; it is now an anonymous segment (memfd) and the spy must see no
 * such creation. The call is passed on to the C library's shm_open. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

int shm_open(const char *name, int oflag, mode_t mode) {
    static int (*real)(const char *, int, mode_t);
    if (!real) real = (int (*)(const char *, int, mode_t))dlsym(RTLD_NEXT, "shm_open");
    if ((oflag & O_CREAT) && strncmp(name, "/shim-", 6) == 0)
        fprintf(stderr, "shm_spy: created %s\n", name);
    return real(name, oflag, mode);
}
