/* Preloaded into MPI ranks (after libshim): the shim's node segments cannot be created
 * (memfd_create of a "libshim-node" object fails with ENOMEM, as a memory-limited container
 * would make it), every other memfd_create goes through. The segment's set-up must fail on
 * every rank alike and every collective run on the point-to-point path, where SHIM_STATS
 * must say so (scripts/tests/shm-tests). Built as a shared object. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

int memfd_create(const char *name, unsigned int flags) {
    static int (*real)(const char *, unsigned int);
    if (name && strncmp(name, "libshim-node", 12) == 0) {
        errno = ENOMEM;
        return -1;
    }
    if (!real) real = (int (*)(const char *, unsigned int))dlsym(RTLD_NEXT, "memfd_create");
    return real ? real(name, flags) : (errno = ENOSYS, -1);
}
