/* trace_p2p.c: a program for tests/test_trace.sh (not a test by itself): a
 * few steps of a linear layer's forward and backward (data parallel over all
 * ranks) and a ring of point-to-point transfers (each rank sends to the next
 * and receives from the one before, 3 transfers a step), recorded with the
 * --trace machinery of the meshgrad program (src/cli/observe.c,
 * src/io/timeline.c) and written to FILE. The test checks the file: every
 * rank, every flow with both ends, spans that nest.
 *   trace_p2p FILE STEPS */
#include <stdio.h>
#include <stdlib.h>

#include "cli/observe.h"
#include "dist/comm.h"
#include "dist/mesh.h"
#include "meshgrad.h"
#include "trace.h"

static int fail(const char *what) {
    fprintf(stderr, "trace_p2p: rank %d: %s: %s\n", mg_rank(), what, mg_last_error());
    return 1;
}

/* One ring exchange of n floats along comm c: send to the next, receive from
 * the one before. */
static int ring(mg_comm *c, float *out, float *in, int64_t n) {
    mg_p2p_request s, r;
    int rc = mg_comm_p2p_group_begin(c);
    if (rc == MG_OK) rc = mg_comm_irecv(c, in, n, (c->rank + c->size - 1) % c->size, &r);
    if (rc == MG_OK) rc = mg_comm_isend(c, out, n, (c->rank + 1) % c->size, &s);
    if (rc == MG_OK) rc = mg_comm_p2p_group_end(c);
    if (rc == MG_OK) rc = mg_comm_p2p_wait(c, &r);
    if (rc == MG_OK) rc = mg_comm_p2p_wait(c, &s);
    return rc;
}

int main(int argc, char **argv) {
    if (mg_init(&argc, &argv) != MG_OK) return fail("mg_init");
    if (argc != 3) {
        fprintf(stderr, "usage: trace_p2p FILE STEPS\n");
        mg_finalize();
        return 2;
    }
    int steps = atoi(argv[2]), world = mg_world_size();
    mg_mesh *mesh = mg_mesh_new(1, &world);
    if (!mesh) return fail("mesh");
    mg_timeline tl;
    if (mg_timeline_prepare(&tl, argv[1], "", 1, steps, mesh->world) != MG_OK) return fail("prepare");
    tl.first = 1; /* every step */
    tl.last = steps;
    // x: (B, I) = (8 * ranks, 16) sharded by rows; w: (O, I) = (4, 16) replicated
    mg_placement shard = MG_SHARD(0), rep = MG_REPLICATE;
    mg_tensor *xf = mg_tensor_new(2, (int64_t[]){8 * world, 16});
    mg_tensor *wf = mg_tensor_new(2, (int64_t[]){4, 16});
    for (int i = 0; i < 8 * world * 16; i++) mg_tensor_data(xf)[i] = (float)(i % 7) - 3;
    for (int i = 0; i < 4 * 16; i++) mg_tensor_data(wf)[i] = (float)(i % 5) * 0.1f;
    mg_dtensor *x = mg_distribute(mesh, xf, &shard, 1), *w = mg_distribute(mesh, wf, &rep, 1);
    if (!x || !w || mg_set_requires_grad(w, 1) != MG_OK) return fail("tensors");
    float out[64], in[64];
    for (int i = 0; i < 64; i++) out[i] = (float)mg_rank();
    for (int s = 1; s <= steps; s++) {
        if (mg_timeline_step_begin(&tl, s, mesh->world) != MG_OK) return fail("step begin");
        mg_trace_begin(MG_TRACE_STEP, "step", s);
        mg_trace_begin(MG_TRACE_PHASE, "forward", 0);
        mg_dtensor *loss = mg_sum(mg_relu(mg_linear(x, w, NULL)));
        mg_trace_end();
        mg_trace_begin(MG_TRACE_PHASE, "backward", 0);
        if (!loss || mg_backward(loss) != MG_OK) return fail("backward");
        mg_trace_end();
        mg_trace_begin(MG_TRACE_PHASE, "transfers", 0);
        for (int k = 0; k < 3; k++)
            if (ring(mesh->dim_comm[0], out, in, 64) != MG_OK) return fail("ring");
        mg_trace_end();
        mg_zero_grad(w);
        mg_step_end();
        mg_trace_end();
        if (mg_timeline_step_end(&tl, s, mesh->world) != MG_OK) return fail("step end");
        if (in[0] != (float)((mg_rank() + world - 1) % world)) {
            fprintf(stderr, "trace_p2p: rank %d received %g from the rank before it\n", mg_rank(),
                    in[0]);
            return 1;
        }
    }
    mg_dtensor_free(x);
    mg_dtensor_free(w);
    mg_tensor_free(xf);
    mg_tensor_free(wf);
    mg_mesh_free(mesh);
    mg_finalize();
    return 0;
}
