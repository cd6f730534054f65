/* fault_stall.c: an MPI program where one rank is late to a collective on
 * purpose, for tests/test_fault_stall.sh (it is not a test by itself).
 *   fault_stall MESH DIM OP LATE_RANK SECONDS
 * builds the mesh MESH ("1x2", "2x2"...), then every rank runs the collective
 * OP (all_reduce | all_gather | barrier | recv) along mesh dim DIM, except
 * LATE_RANK, which first sleeps SECONDS. recv is point-to-point: each rank
 * sends to the next one along the dim and waits to receive from the one
 * before, so the rank after LATE_RANK waits for a message that does not come. Afterwards every rank meets in a barrier over the
 * whole mesh and rank 0 prints "fault_stall: done". With MG_COLLECTIVE_TIMEOUT
 * below SECONDS the watchdog must end the job; above it, the run must pass.
 * OP flops is mg_pp_measure_flops with the first half of the ranks measuring
 * and the others napping: LATE_RANK starts it with the others, then stalls
 * for SECONDS before it gives its rate. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/comm.h"
#include "dist/mesh.h"
#include "meshgrad.h"
#include "nn/pipeline_cost.h"

static int fail(const char *what) {
    fprintf(stderr, "fault_stall: rank %d: %s: %s\n", mg_rank(), what, mg_last_error());
    mg_finalize();
    return 1;
}

int main(int argc, char **argv) {
    if (mg_init(&argc, &argv) != MG_OK) return fail("mg_init");
    if (argc != 6) {
        if (mg_rank() == 0)
            fprintf(stderr, "usage: fault_stall MESH DIM all_reduce|all_gather|barrier|recv|flops "
                            "LATE_RANK SECONDS\n");
        mg_finalize();
        return 2;
    }
    int shape[MG_MAX_MESH_DIMS];
    int ndim = mg_mesh_parse(argv[1], shape);
    if (ndim < 0) return fail("mesh");
    int dim = atoi(argv[2]), late = atoi(argv[4]);
    const char *op = argv[3];
    double seconds = atof(argv[5]);
    mg_mesh *mesh = mg_mesh_new(ndim, shape);
    if (!mesh) return fail("mg_mesh_new");
    if (dim < 0 || dim >= ndim) {
        fprintf(stderr, "fault_stall: dim %d is not a dim of mesh %s\n", dim, argv[1]);
        mg_mesh_free(mesh);
        mg_finalize();
        return 2;
    }
    mg_comm *c = mesh->dim_comm[dim];
    int me = mg_rank();
    bool flops = strcmp(op, "flops") == 0;
    if (me == late && !flops) {
        fprintf(stderr, "fault_stall: rank %d sleeps %g s before entering %s on mesh dim %d\n", me,
                seconds, op, dim);
        usleep((useconds_t)(seconds * 1e6));
    }
    // buf: (size) floats, one per member of the mesh dim
    float *buf = calloc((size_t)c->size, sizeof(float));
    buf[0] = 1.0f;
    int rc;
    if (strcmp(op, "all_reduce") == 0)
        rc = mg_comm_all_reduce(c, buf, 1, MG_REDUCE_SUM);
    else if (strcmp(op, "all_gather") == 0)
        rc = mg_comm_all_gather(c, buf + c->rank, 1, buf);
    else if (flops && me == late) { /* mg_pp_measure_flops's collectives, a stall between */
        float ready = 1, v[3] = {1, 0, 1};
        rc = mg_comm_all_reduce(c, &ready, 1, MG_REDUCE_MAX);
        fprintf(stderr, "fault_stall: rank %d sleeps %g s while measuring on mesh dim %d\n", me,
                seconds, dim);
        usleep((useconds_t)(seconds * 1e6));
        mg_comm_request req;
        if (rc == MG_OK) rc = mg_comm_iall_reduce(c, v, 3, &req);
        if (rc == MG_OK) rc = mg_comm_wait(c, &req);
    } else if (flops) {
        double rate = 0;
        rc = mg_pp_measure_flops(c, c->size / 2, 8, 64, 64, &rate);
    } else if (strcmp(op, "recv") == 0) {
        mg_p2p_request s, r;
        float got = 0;
        rc = mg_comm_irecv(c, &got, 1, (c->rank + c->size - 1) % c->size, &r);
        if (rc == MG_OK) rc = mg_comm_isend(c, buf, 1, (c->rank + 1) % c->size, &s);
        if (rc == MG_OK) rc = mg_comm_p2p_wait(c, &r);
        if (rc == MG_OK) rc = mg_comm_p2p_wait(c, &s);
    }
    else
        rc = mg_comm_barrier(c);
    free(buf);
    if (rc != MG_OK) return fail(op);
    if (mg_comm_barrier(mesh->world) != MG_OK) return fail("barrier");
    if (me == 0) printf("fault_stall: done\n");
    mg_mesh_free(mesh);
    mg_finalize();
    return 0;
}
