/* Calls MPI_Init against whatever MPI library it was linked with (the fake Open MPI in
 * scripts/launch-tests); with libshim preloaded, the ABI check must stop it there. */
#include <stdio.h>
int MPI_Init(int *argc, char ***argv);
int MPI_Finalize(void);
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    puts("MPI_Init returned: the ABI check did not stop a foreign MPI");
    MPI_Finalize();
    return 0;
}
