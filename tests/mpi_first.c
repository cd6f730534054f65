/* mpi_first.c: a program that starts MPI itself, uses meshgrad on a mesh
 * of the whole world (a redistribute, so the communicators get their
 * records; then more meshes, made and freed, than the table of records
 * holds), calls mg_finalize and then goes on with MPI on its own: an
 * MPI_Allreduce over MPI_COMM_WORLD, then MPI_Finalize, which deletes every
 * attribute still on a communicator. Prints "sum N" (N: the world's size)
 * and exits 0; any error exits 1. Run by test_mpi_first.sh (under mpirun,
 * and under valgrind: MPI_Finalize must not read what mg_finalize freed). */
#include <mpi.h>
#include <stdio.h>

#include "meshgrad.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int world = 1, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (mg_init(&argc, &argv) != MG_OK) {
        fprintf(stderr, "mg_init: %s\n", mg_last_error());
        return 1;
    }
    int shape[1] = {world};
    mg_mesh *mesh = mg_mesh_new(1, shape);
    int64_t dims[2] = {4, 4}; // x: (4, 4), sharded on rows, gathered back
    mg_tensor *t = mg_tensor_new(2, dims);
    mg_placement rows[1] = {MG_SHARD(0)}, rep[1] = {MG_REPLICATE};
    mg_dtensor *x = mesh && t ? mg_distribute(mesh, t, rows, 1) : NULL;
    mg_dtensor *y = x ? mg_redistribute(x, rep, 1) : NULL;
    if (!y) {
        fprintf(stderr, "meshgrad: %s\n", mg_last_error());
        return 1;
    }
    /* meshes made and freed past the table of records (MG_COMM_INFO_MAX):
     * their communicators' records are freed with them */
    for (int i = 0; i < 1100 && y; i++) {
        mg_mesh *m = mg_mesh_new(1, shape);
        if (!m) y = NULL;
        mg_mesh_free(m);
    }
    if (!y) {
        fprintf(stderr, "meshgrad: %s\n", mg_last_error());
        return 1;
    }
    mg_step_end();
    mg_dtensor_free(x);
    mg_tensor_free(t);
    mg_mesh_free(mesh);
    mg_finalize();
    int one = 1, sum = 0; /* MPI is the program's again */
    if (MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS) return 1;
    if (rank == 0) printf("sum %d\n", sum);
    MPI_Finalize();
    return sum == world ? 0 : 1;
}
