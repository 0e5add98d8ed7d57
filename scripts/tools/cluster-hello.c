/* cluster-hello: the check program of scripts/tests/cluster-tests (scripts/tools/cluster).
 * Each rank prints "rank R of N on NAME local L of S" (NAME: MPI_Get_processor_name, S: the
 * size of MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), L: the rank in it), then checks an
 * MPI_Allreduce and a ring of 1 MiB MPI_Sendrecv's (each rank sends to rank+1, whose
 * node is another one when a node's ranks are consecutive), then rounds of Bcast,
 * Allreduce and Gather on the node-local communicator (the shim's node transport takes
 * those, SHIM_TRANSPORT=shm, while the world's spans nodes), and rank 0 prints
 * "PASS cluster-hello N" or each rank "FAIL ..." (exit status 1). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RING_BYTES (1 << 20)

int main(int argc, char **argv)
{
    int rank, size, lrank, lsize, len, bad = 0, allbad;
    char name[MPI_MAX_PROCESSOR_NAME];
    MPI_Comm node;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(name, &len);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &lrank);
    MPI_Comm_size(node, &lsize);
    printf("rank %d of %d on %s local %d of %d\n", rank, size, name, lrank, lsize);
    fflush(stdout);

    long v = rank + 1, sum = 0;
    MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (sum != (long)size * (size + 1) / 2) {
        printf("FAIL rank %d: allreduce %ld, want %ld\n", rank, sum, (long)size * (size + 1) / 2);
        bad = 1;
    }
    /* the local sizes must agree within a node */
    int lmax = 0, lmin = 0;
    MPI_Allreduce(&lsize, &lmax, 1, MPI_INT, MPI_MAX, node);
    MPI_Allreduce(&lsize, &lmin, 1, MPI_INT, MPI_MIN, node);
    if (lmax != lmin) {
        printf("FAIL rank %d: node-local sizes differ\n", rank);
        bad = 1;
    }

    /* the node's own collectives, each round with new data */
    for (int round = 0; round < 20 && !bad; round++) {
        long b = lrank == round % lsize ? 1000 * round + rank : -1;
        MPI_Bcast(&b, 1, MPI_LONG, round % lsize, node);
        long lv = (long)lrank * round + 1, ls = 0, want = (long)round * lsize * (lsize - 1) / 2 + lsize;
        MPI_Allreduce(&lv, &ls, 1, MPI_LONG, MPI_SUM, node);
        int g[64] = {0}, mine = rank * 100 + round;
        if (lsize <= 64) MPI_Gather(&mine, 1, MPI_INT, g, 1, MPI_INT, 0, node);
        int gok = 1;
        for (int i = 0; lrank == 0 && lsize <= 64 && i < lsize; i++) gok &= g[i] == (rank + i) * 100 + round;
        if (b < 0 || b % 1000 != rank - lrank + round % lsize || ls != want || !gok) {
            printf("FAIL rank %d: node round %d: bcast %ld, allreduce %ld (want %ld), gather %s\n", rank,
                   round, b, ls, want, gok ? "ok" : "wrong");
            bad = 1;
        }
    }

    unsigned char *sb = malloc(RING_BYTES), *rb = malloc(RING_BYTES);
    int to = (rank + 1) % size, from = (rank + size - 1) % size;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < RING_BYTES; i++) sb[i] = (unsigned char)(rank * 31 + i * 7 + round);
        memset(rb, 0, RING_BYTES);
        MPI_Sendrecv(sb, RING_BYTES, MPI_BYTE, to, round, rb, RING_BYTES, MPI_BYTE, from, round,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (int i = 0; i < RING_BYTES; i++)
            if (rb[i] != (unsigned char)(from * 31 + i * 7 + round)) {
                printf("FAIL rank %d: ring round %d byte %d from %d\n", rank, round, i, from);
                bad = 1;
                break;
            }
    }
    free(sb);
    free(rb);
    MPI_Allreduce(&bad, &allbad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 && !allbad) printf("PASS cluster-hello %d\n", size);
    MPI_Comm_free(&node);
    MPI_Finalize();
    return bad;
}
