/* observe_api.c: a program for tests/test_observe_api.sh (not a test by
 * itself), written against meshgrad.h alone: the calls that show inside a
 * run (mg_flight_recorder_*, mg_trace_*).
 *   observe_api DIR TRACE NOT_A_TRACE
 * - refused, with MG_E* and a message: a dump before a directory is set, a
 *   reason of 64 characters, a trace over NOT_A_TRACE (a file that is not a
 *   trace: left as it is), steps 3 to 2, a path that differs between ranks,
 *   a second trace while one is open;
 * - then DIR is set and 4 steps of a data-parallel linear layer run, steps 2
 *   and 3 traced into TRACE; each rank dumps its flight recorder on demand
 *   ("asked by the test"). The test reads both with check_trace.py and
 *   `meshgrad trace analyze DIR`.
 * Prints "ok: ..." or "FAILED: ..." per check (rank 0); exit 0 when all passed. */
#include <stdio.h>
#include <string.h>

#include <meshgrad.h>

static int failures;

static void expect(int ok, const char *what) {
    if (!ok) failures++;
    if (mg_rank() == 0)
        printf("%s: %s%s%s\n", ok ? "ok" : "FAILED", what, ok ? "" : ": ", ok ? "" : mg_last_error());
}

/* rc is the status `want` and the message says `says` */
static void refused(int rc, int want, const char *says, const char *what) {
    int ok = rc == want && strstr(mg_last_error(), says) != NULL;
    if (!ok) failures++;
    if (mg_rank() == 0)
        printf("%s: %s refused (%d): %s\n", ok ? "ok" : "FAILED", what, rc, mg_last_error());
}

int main(int argc, char **argv) {
    if (mg_init(&argc, &argv) != MG_OK || argc != 4) {
        fprintf(stderr, "usage: observe_api DIR TRACE NOT_A_TRACE\n");
        return 2;
    }
    const char *dir = argv[1], *trace = argv[2], *other = argv[3];
    char long_reason[65], mine[64];
    memset(long_reason, 'r', 64);
    long_reason[64] = '\0';

    refused(mg_flight_recorder_dump("early"), MG_ESTATE, "call mg_flight_recorder_set_dir(DIR) first",
            "a dump before a directory is set");
    refused(mg_trace_open(other, 1, 2), MG_EIO, "not a trace this program wrote",
            "a trace over a file that is not one");
    refused(mg_trace_open(trace, 3, 2), MG_EINVAL, "give 0 <= first <= last", "steps 3 to 2");
    snprintf(mine, sizeof mine, "%s.rank%d", trace, mg_rank());
    if (mg_world_size() > 1)
        refused(mg_trace_open(mine, 1, 2), MG_EINVAL, "the ranks gave other paths",
                "a path that differs between ranks");

    expect(mg_flight_recorder_set_dir(dir) == MG_OK, "mg_flight_recorder_set_dir");
    refused(mg_flight_recorder_dump(long_reason), MG_EINVAL, "1 to 63 characters",
            "a reason of 64 characters");
    expect(mg_trace_open(trace, 2, 3) == MG_OK, "mg_trace_open of steps 2 to 3");
    refused(mg_trace_open(trace, 2, 3), MG_ESTATE, "a trace is open already", "a second trace");

    // y = x w^T on a data-parallel mesh: x (4 ranks, 8) sharded by rows, w (3, 8) replicated
    int world = mg_world_size();
    mg_mesh *mesh = mg_mesh_new(1, &world);
    mg_tensor *xf = mg_tensor_new(2, (int64_t[]){4 * world, 8});
    mg_tensor *wf = mg_tensor_new(2, (int64_t[]){3, 8});
    for (int i = 0; i < 32 * world; i++) mg_tensor_data(xf)[i] = (float)(i % 5) - 2;
    for (int i = 0; i < 24; i++) mg_tensor_data(wf)[i] = 0.1f * (float)(i % 3);
    mg_placement rows = MG_SHARD(0), rep = MG_REPLICATE;
    mg_dtensor *x = mg_distribute(mesh, xf, &rows, 1), *w = mg_distribute(mesh, wf, &rep, 1);
    expect(x && w && mg_set_requires_grad(w, 1) == MG_OK, "the tensors");
    int steps_ok = 1;
    for (int64_t step = 1; step <= 4 && steps_ok; step++) {
        steps_ok = mg_trace_step_begin(step) == MG_OK;
        mg_dtensor *loss = mg_sum(mg_relu(mg_linear(x, w, NULL)));
        steps_ok = steps_ok && loss && mg_backward(loss) == MG_OK && mg_zero_grad(w) == MG_OK;
        mg_step_end();
        steps_ok = steps_ok && mg_trace_step_end(step) == MG_OK;
    }
    expect(steps_ok, "4 steps, 2 and 3 traced");
    expect(mg_trace_close() == MG_OK, "mg_trace_close after the trace was written");
    expect(mg_flight_recorder_dump("asked by the test") == MG_OK, "mg_flight_recorder_dump");

    mg_dtensor_free(x);
    mg_dtensor_free(w);
    mg_tensor_free(xf);
    mg_tensor_free(wf);
    mg_mesh_free(mesh);
    mg_finalize();
    return failures ? 1 : 0;
}
