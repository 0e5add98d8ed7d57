/* A stand-in for an Open MPI library, just enough for libshim's ABI check: it reports an
 * Open MPI version string and exports Open MPI's world object, so the MPICH-ABI build
 * must refuse to run and abort through it. Built as libfakempi.so by scripts/launch-tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char ompi_mpi_comm_world[512];

int PMPI_Get_library_version(char *version, int *len) {
    strcpy(version, "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26, 2022");
    *len = (int)strlen(version);
    return 0;
}
int PMPI_Init(int *argc, char ***argv) { (void)argc, (void)argv; return 0; }
int PMPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    (void)argc, (void)argv;
    *provided = required;
    return 0;
}
int PMPI_Initialized(int *flag) { *flag = 1; return 0; }
int PMPI_Finalized(int *flag) { *flag = 0; return 0; }
int PMPI_Abort(void *comm, int code) {
    fprintf(stderr, "fake-ompi: PMPI_Abort(%s, %d)\n",
            comm == (void *)ompi_mpi_comm_world ? "&ompi_mpi_comm_world" : "unexpected handle", code);
    exit(3);
}
int PMPI_Finalize(void) { return 0; }
int MPI_Init(int *argc, char ***argv) { return PMPI_Init(argc, argv); }
int MPI_Finalize(void) { return PMPI_Finalize(); }
