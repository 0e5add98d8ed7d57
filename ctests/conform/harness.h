/* The conformance harness: what a conformance program (ctests/conform/) and its driver
 * (scripts/conform.py) agree on.
 *
 * A program is a list of numbered cases generated from tables. It runs the same way with
 * and without the shim; the driver runs it natively and under each shim configuration and
 * compares. The harness's own communication uses PMPI_* on a duplicate of MPI_COMM_WORLD
 * made through MPI_Comm_dup (so, under ghost processes, on the user world), never the
 * functions under test.
 *
 * Environment:
 *   CONFORM_FROM=k     skip cases below k (the driver resumes after a case that crashed
 *                      or hung the job);
 *   CONFORM_LEVEL=full the full table (default: reduced);
 *   CONFORM_ONLY=k     run only case k (for reproducing one case by hand);
 *   CONFORM_SKIP=id,id,... or @file (one id at the start of each line): cases not to run
 *                      (e.g. the ones the system MPI itself crashes on, to save restarts);
 *   CONFORM_PROGRESS=f rank 0 also appends "CASE <id>" / "DONE <id>" to file f with
 *                      write(2), which survives an abort (stdout lines still in the pipe to
 *                      mpirun can be lost when the job is torn down).
 *
 * Output (stdout, one line each, flushed):
 *   CASE <id> <name>             rank 0, before case <id> starts;
 *   FAIL <id> <rank> <detail>    any rank whose check of case <id> failed;
 *   RC <id> <class>              rank 0: the error class a call returned (error tables);
 *   EXPECT <id> <class>          rank 0: the class the standard names for it (error tables);
 *   DONE <id> <ok|fail>          rank 0, after case <id> (all ranks agreed on the outcome);
 *   END <cases>                  rank 0, when the program ran to the end.
 */
#ifndef SHIM_CONFORM_HARNESS_H
#define SHIM_CONFORM_HARNESS_H

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

static int h_rank = -1, h_size = 0;
static MPI_Comm h_comm = MPI_COMM_NULL; /* the harness's own communicator */
static int h_from = 0, h_only = -1, h_full = 0;
static int h_ok;                       /* this rank's verdict on the current case */
static int h_cases = 0;
static int *h_skip, h_nskip;
static int h_progress_fd = -1;

static void h_read_skip(const char *s) {
    FILE *f = NULL;
    if (*s == '@' && !(f = fopen(s + 1, "r"))) {
        fprintf(stderr, "cannot read %s\n", s + 1);
        return;
    }
    const char *p = s;
    int cap = 0;
    char line[256];
    for (;;) {
        long id;
        if (f) {
            if (!fgets(line, sizeof line, f)) break;
            if (sscanf(line, "%ld", &id) != 1) continue;
        } else {
            char *e;
            if (!*p) break;
            id = strtol(p, &e, 10);
            if (e == p) break;
            p = *e ? e + 1 : e;
        }
        if (h_nskip == cap) h_skip = realloc(h_skip, sizeof(int) * (cap = cap ? 2 * cap : 64));
        h_skip[h_nskip++] = (int)id;
    }
    if (f) fclose(f);
}

static void h_progress(const char *what, int id) {
    if (h_progress_fd < 0 || h_rank != 0) return;
    char line[64];
    int n = snprintf(line, sizeof line, "%s %d\n", what, id);
    if (write(h_progress_fd, line, n) != n) h_progress_fd = -1;
}

static void h_init(int *argc, char ***argv) {
    int provided;
    const char *t = getenv("CONFORM_THREAD_MULTIPLE");
    if (t && atoi(t))
        MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    else
        MPI_Init(argc, argv);
    MPI_Comm_dup(MPI_COMM_WORLD, &h_comm);
    PMPI_Comm_set_errhandler(h_comm, MPI_ERRORS_ARE_FATAL);
    PMPI_Comm_rank(h_comm, &h_rank);
    PMPI_Comm_size(h_comm, &h_size);
    const char *s;
    if ((s = getenv("CONFORM_FROM"))) h_from = atoi(s);
    if ((s = getenv("CONFORM_ONLY"))) h_only = atoi(s);
    if ((s = getenv("CONFORM_LEVEL"))) h_full = strcmp(s, "full") == 0;
    if ((s = getenv("CONFORM_SKIP")) && *s) h_read_skip(s);
    if ((s = getenv("CONFORM_PROGRESS")) && *s && h_rank == 0)
        h_progress_fd = open(s, O_WRONLY | O_APPEND | O_CREAT, 0644);
}

/* Whether case `id` runs in this job (every rank decides the same). */
static int h_selected(int id) {
    if (h_only >= 0) return id == h_only;
    for (int i = 0; i < h_nskip; i++)
        if (h_skip[i] == id) return 0;
    return id >= h_from;
}

/* Starts case `id`; returns 0 when it is skipped (the caller must then skip it on every
 * rank). */
static int h_begin(int id, const char *fmt, ...) {
    h_cases++;
    if (!h_selected(id)) return 0;
    h_ok = 1;
    if (h_rank == 0) {
        char name[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(name, sizeof name, fmt, ap);
        va_end(ap);
        printf("CASE %d %s\n", id, name);
        fflush(stdout);
        h_progress("CASE", id);
    }
    return 1;
}

/* Records a failed check of case `id` on this rank (the case goes on; the first few
 * failures of a case are printed). */
static int h_fails_printed;
static void h_fail(int id, const char *fmt, ...) {
    if (h_ok) h_fails_printed = 0;
    h_ok = 0;
    if (h_fails_printed++ >= 3) return;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (char *p = msg; *p; p++)
        if (*p == '\n') *p = ' ';
    printf("FAIL %d %d %s\n", id, h_rank, msg);
    fflush(stdout);
}

#define H_CHECK(id, cond, ...)                  \
    do {                                        \
        if (!(cond)) h_fail((id), __VA_ARGS__); \
    } while (0)

/* Ends case `id`: all ranks agree on the outcome (this also keeps ranks in step, so the
 * last CASE line names the case a crash or hang happened in). */
static void h_end(int id) {
    int all = 0;
    PMPI_Allreduce(&h_ok, &all, 1, MPI_INT, MPI_MIN, h_comm);
    if (h_rank == 0) {
        printf("DONE %d %s\n", id, all ? "ok" : "fail");
        fflush(stdout);
        h_progress("DONE", id);
    }
}

/* The name of an error class (for RC/EXPECT lines). */
static const char *h_class_name(int cls) {
    switch (cls) {
#define C(x) \
    case x:  \
        return #x;
        C(MPI_SUCCESS) C(MPI_ERR_BUFFER) C(MPI_ERR_COUNT) C(MPI_ERR_TYPE) C(MPI_ERR_TAG)
        C(MPI_ERR_COMM) C(MPI_ERR_RANK) C(MPI_ERR_REQUEST) C(MPI_ERR_ROOT) C(MPI_ERR_GROUP)
        C(MPI_ERR_OP) C(MPI_ERR_TOPOLOGY) C(MPI_ERR_DIMS) C(MPI_ERR_ARG) C(MPI_ERR_UNKNOWN)
        C(MPI_ERR_TRUNCATE) C(MPI_ERR_OTHER) C(MPI_ERR_INTERN) C(MPI_ERR_IN_STATUS)
        C(MPI_ERR_PENDING) C(MPI_ERR_INFO) C(MPI_ERR_INFO_KEY) C(MPI_ERR_INFO_VALUE)
        C(MPI_ERR_NO_MEM) C(MPI_ERR_WIN) C(MPI_ERR_SIZE) C(MPI_ERR_DISP) C(MPI_ERR_BASE)
        C(MPI_ERR_LOCKTYPE) C(MPI_ERR_RMA_SYNC) C(MPI_ERR_RMA_RANGE) C(MPI_ERR_RMA_CONFLICT)
        C(MPI_ERR_ASSERT) C(MPI_ERR_KEYVAL)
#undef C
    default:
        return "MPI_ERR_(other)";
    }
}

/* Reports the class of return code `rc` of case `id` (rank 0's is printed; the ranks'
 * classes must agree, else the case fails). */
static void h_rc(int id, int rc) {
    int cls = rc;
    if (rc != MPI_SUCCESS) PMPI_Error_class(rc, &cls);
    int lo = 0, hi = 0;
    PMPI_Allreduce(&cls, &lo, 1, MPI_INT, MPI_MIN, h_comm);
    PMPI_Allreduce(&cls, &hi, 1, MPI_INT, MPI_MAX, h_comm);
    if (lo != hi) h_fail(id, "ranks returned different error classes (%d..%d)", lo, hi);
    if (h_rank == 0) {
        printf("RC %d %s\n", id, h_class_name(cls));
        fflush(stdout);
    }
}

static void h_expect(int id, int cls) {
    if (h_rank == 0) {
        printf("EXPECT %d %s\n", id, h_class_name(cls));
        fflush(stdout);
    }
}

static void h_finish(void) {
    if (h_rank == 0) {
        printf("END %d\n", h_cases);
        fflush(stdout);
    }
    PMPI_Comm_free(&h_comm);
    MPI_Finalize();
}

#endif
