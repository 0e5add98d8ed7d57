/* Preloaded after libshim (LD_PRELOAD="libshim.so shm_spy.so"): reports every POSIX
 * shared-memory object created with a name of libshim's ("/shim-..."), on stderr as
 * "shm_spy: created /shim-...". A ghost window's memory used to be such an object, named in
 * /dev/shm from its creation until every process of the node had mapped it, so a rank killed
 * in between left it behind; it is now an anonymous segment (memfd) and the spy must see no
 * such creation. The call is passed on to the C library's shm_open.
 * SHM_SPY_DENY_PROC=1: opening another process's descriptor (/proc/<pid>/fd/<n>) fails
 * of libshim's window memory with EACCES, as under a ptrace policy that refuses it, so that the shim's fallbacks run
 * (a named object for the ghosts; a window through the ghosts instead of direct). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

int shm_open(const char *name, int oflag, mode_t mode) {
    static int (*real)(const char *, int, mode_t);
    if (!real) real = (int (*)(const char *, int, mode_t))dlsym(RTLD_NEXT, "shm_open");
    if ((oflag & O_CREAT) && strncmp(name, "/shim-", 6) == 0)
        fprintf(stderr, "shm_spy: created %s\n", name);
    return real(name, oflag, mode);
}

static int denied(const char *path) {
    static int deny = -1;
    if (deny < 0) deny = getenv("SHM_SPY_DENY_PROC") && atoi(getenv("SHM_SPY_DENY_PROC")) == 1;
    if (!deny || strncmp(path, "/proc/", 6) != 0 || !strstr(path, "/fd/")) return 0;
    /* only libshim's window memory (the C library and UCX open such paths too) */
    char target[256];
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n <= 0) return 0;
    target[n] = 0;
    if (!strstr(target, "memfd:libshim-win")) return 0;
    errno = EACCES;
    return 1;
}

#define OPEN_LIKE(fn)                                                                    \
    int fn(const char *path, int flags, ...) {                                           \
        static int (*real)(const char *, int, ...);                                      \
        if (!real) real = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, #fn);        \
        mode_t mode = 0;                                                                 \
        if (flags & (O_CREAT | O_TMPFILE)) {                                             \
            va_list ap;                                                                  \
            va_start(ap, flags);                                                         \
            mode = va_arg(ap, mode_t);                                                   \
            va_end(ap);                                                                  \
        }                                                                                \
        if (denied(path)) return -1;                                                     \
        return real(path, flags, mode);                                                  \
    }
OPEN_LIKE(open)
OPEN_LIKE(open64)
