/* Preloaded into MPI ranks (after libshim): a seccomp filter that refuses
 * process_vm_readv and process_vm_writev with EPERM, as a container's profile or Yama's
 * ptrace_scope would. The node segment still maps; the shim's probe at its setup must find
 * single copy refused, every rank must agree on it, and collectives larger than a slot must
 * take the point-to-point path (scripts/tests/shm-tests). With NO_CMA=kill the filter kills
 * the process instead: a run told never to use single copy (SHIM_SHM_SINGLE_COPY=off) must
 * not call either, not even to probe. Built as a shared object. */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

__attribute__((constructor)) static void refuse_cma(void) {
    const char *mode = getenv("NO_CMA");
    unsigned refuse = mode && strcmp(mode, "kill") == 0
                          ? SECCOMP_RET_KILL_PROCESS
                          : SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA);
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_writev, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, refuse),
    };
    struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        perror("no_cma: seccomp");
}
