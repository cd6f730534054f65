/* test_p2p.c (MPI): point-to-point sends and receives of comm.h (comm_p2p.c)
 * on the world and on every mesh dim of every mesh the world size allows:
 * a ring exchange with a different (possibly empty) size per rank; several
 * messages in flight between the same two ranks meeting in posting order,
 * whichever side posts first; messages split above the per-call count limit;
 * polling with mg_comm_p2p_test; the counters (send: 4n bytes, recv: 0);
 * and the refusals (bad peer, negative count, a receive shorter than its
 * send). The watchdog naming a peer that never sends is tested by
 * tests/test_fault_stall.sh (it ends the job). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"
#include "status.h"
#include "test_dist.h"
#include "testutil.h"

static int world;

/* Value i of the message number `msg` that rank `from` sends. */
static float val(int from, int msg, int64_t i) { return (float)(from * 10000 + msg * 1000 + i % 997); }

/* Message sizes differ by rank and include an empty one. */
static int64_t size_of(int from, int msg) { return (from * 37 + msg * 11) % 23; }

/* Every comm of every mesh of the world: calls f(c, msg, len); 1 when all pass. */
static int for_each_comm(int (*f)(mg_comm *, char *, size_t), char *msg, size_t len) {
    test_mesh_shape ms[16];
    int nm = test_meshes(world, 2, ms), ok = 1;
    for (int m = 0; m < nm && ok; m++) {
        mg_mesh *mesh = mg_mesh_new(ms[m].ndim, ms[m].shape);
        if (!mesh) {
            snprintf(msg, len, "mg_mesh_new: %s", mg_last_error());
            return 0;
        }
        for (int ci = -1; ci < mesh->ndim && ok; ci++)
            ok = f(ci < 0 ? mesh->world : mesh->dim_comm[ci], msg, len);
        mg_mesh_free(mesh);
    }
    return ok;
}

/* Rank r sends to r + 1 and receives from r - 1 (mod k); receives posted first
 * on even ranks, sends first on odd ones. */
static int ring(mg_comm *c, char *msg, size_t len) {
    int k = c->size, me = c->rank, next = (me + 1) % k, prev = (me + k - 1) % k;
    int64_t ns = size_of(me, 0), nr = size_of(prev, 0);
    float *out = malloc((size_t)(ns + 1) * sizeof(float)), *in = malloc((size_t)(nr + 1) * sizeof(float));
    for (int64_t i = 0; i < ns; i++) out[i] = val(me, 0, i);
    mg_p2p_request s, r;
    mg_comm_stats_reset();
    int rc;
    if (me % 2 == 0) {
        rc = mg_comm_irecv(c, in, nr, prev, &r);
        if (rc == MG_OK) rc = mg_comm_isend(c, out, ns, next, &s);
    } else {
        rc = mg_comm_isend(c, out, ns, next, &s);
        if (rc == MG_OK) rc = mg_comm_irecv(c, in, nr, prev, &r);
    }
    if (rc == MG_OK) rc = mg_comm_p2p_wait(c, &r);
    if (rc == MG_OK) rc = mg_comm_p2p_wait(c, &s);
    int ok = rc == MG_OK && r.done && s.done;
    if (!ok) snprintf(msg, len, "ring on %d ranks: %s", k, mg_last_error());
    for (int64_t i = 0; i < nr && ok; i++)
        if (in[i] != val(prev, 0, i)) {
            snprintf(msg, len, "ring on %d ranks: element %lld from rank %d is %g, want %g", k,
                     (long long)i, prev, in[i], val(prev, 0, i));
            ok = 0;
        }
    mg_comm_stats st[MG_COLL_COUNT];
    mg_comm_stats_get(st);
    int64_t want_bytes = k > 1 ? 4 * ns : 0;
    if (ok && (st[MG_COLL_SEND].calls != 1 || st[MG_COLL_RECV].calls != 1 ||
               st[MG_COLL_SEND].bytes != want_bytes || st[MG_COLL_RECV].bytes != 0)) {
        snprintf(msg, len, "counters: send %lld calls %lld bytes (want 1, %lld), recv %lld calls",
                 (long long)st[MG_COLL_SEND].calls, (long long)st[MG_COLL_SEND].bytes,
                 (long long)want_bytes, (long long)st[MG_COLL_RECV].calls);
        ok = 0;
    }
    free(out);
    free(in);
    return ok;
}

START_TEST(ring_exchange) {
    char msg[256] = "";
    int ok = for_each_comm(ring, msg, sizeof msg);
    mg_assert_all(ok, "%s", msg);
    ck_assert_str_eq(mg_coll_name(MG_COLL_SEND), "send");
    ck_assert_str_eq(mg_coll_name(MG_COLL_RECV), "recv");
}
END_TEST

enum { NMSG = 5 };

/* NMSG messages of different sizes from each rank to the next, all in flight
 * at once, in one group; the receiver takes them in the order they were sent.
 * Rank 0 polls with mg_comm_p2p_test, the others wait. */
static int in_order(mg_comm *c, char *msg, size_t len) {
    int k = c->size, me = c->rank, next = (me + 1) % k, prev = (me + k - 1) % k;
    float *out[NMSG], *in[NMSG];
    mg_p2p_request s[NMSG], r[NMSG];
    int rc = mg_comm_p2p_group_begin(c);
    for (int m = 0; m < NMSG; m++) {
        int64_t ns = size_of(me, m) + 3, nr = size_of(prev, m) + 3;
        out[m] = malloc((size_t)ns * sizeof(float));
        in[m] = calloc((size_t)nr, sizeof(float));
        for (int64_t i = 0; i < ns; i++) out[m][i] = val(me, m, i);
        if (rc == MG_OK) rc = mg_comm_isend(c, out[m], ns, next, &s[m]);
        if (rc == MG_OK) rc = mg_comm_irecv(c, in[m], nr, prev, &r[m]);
    }
    if (rc == MG_OK) rc = mg_comm_p2p_group_end(c);
    for (int m = NMSG - 1; m >= 0 && rc == MG_OK; m--) { /* finish in any order */
        if (me == 0)
            while (rc == MG_OK && !r[m].done) rc = mg_comm_p2p_test(c, &r[m]);
        else
            rc = mg_comm_p2p_wait(c, &r[m]);
    }
    for (int m = 0; m < NMSG && rc == MG_OK; m++) rc = mg_comm_p2p_wait(c, &s[m]);
    int ok = rc == MG_OK;
    if (!ok) snprintf(msg, len, "in order on %d ranks: %s", k, mg_last_error());
    for (int m = 0; m < NMSG; m++) {
        for (int64_t i = 0; ok && i < size_of(prev, m) + 3; i++)
            if (in[m][i] != val(prev, m, i)) {
                snprintf(msg, len, "message %d element %lld is %g, want %g", m, (long long)i,
                         in[m][i], val(prev, m, i));
                ok = 0;
            }
        free(out[m]);
        free(in[m]);
    }
    return ok;
}

START_TEST(messages_meet_in_order) {
    char msg[256] = "";
    int ok = for_each_comm(in_order, msg, sizeof msg);
    mg_assert_all(ok, "%s", msg);
    /* above the per-call count limit: every message goes as pieces of 3 */
    mg_comm_mpi_set_max_count(3);
    ok = for_each_comm(in_order, msg, sizeof msg);
    mg_comm_mpi_set_max_count(0);
    mg_assert_all(ok, "split: %s", msg);
}
END_TEST

START_TEST(refusals) {
    mg_mesh *mesh = mg_mesh_new(1, &world);
    mg_comm *c = mesh->world;
    float buf[8] = {0};
    mg_p2p_request req;
    ck_assert_int_eq(mg_comm_isend(c, buf, 4, world, &req), MG_EINVAL);
    ck_assert_msg(strstr(mg_last_error(), "is not a rank of a communicator of"), "%s",
                  mg_last_error());
    ck_assert(req.done);
    ck_assert_int_eq(mg_comm_irecv(c, buf, -1, 0, &req), MG_EINVAL);
    ck_assert_msg(strstr(mg_last_error(), "negative"), "%s", mg_last_error());
    /* sizes that disagree, around the ring: a receive shorter than its send
     * (MPI_ERR_TRUNCATE), then a longer one. Not on one rank: Open MPI 4.1
     * truncates a message to oneself without a word. */
    if (world > 1) {
        float big[8] = {1, 2, 3, 4, 5, 6, 7, 8}, small[8];
        int next = (c->rank + 1) % world, prev = (c->rank + world - 1) % world;
        for (int longer = 0; longer < 2; longer++) {
            mg_p2p_request s, r;
            ck_assert(mg_comm_irecv(c, small, longer ? 8 : 4, prev, &r) == MG_OK);
            ck_assert(mg_comm_isend(c, big, longer ? 4 : 8, next, &s) == MG_OK);
            int rc = mg_comm_p2p_wait(c, &r);
            mg_assert_all(rc == MG_ECOMM, "sizes 8 and 4: the receive returned %d", rc);
            mg_assert_all(strstr(mg_last_error(), longer ? "got 4: a send and its receive must "
                                                           "have one size"
                                                         : "recv of 4 floats from rank"),
                          "%s", mg_last_error());
            mg_comm_p2p_wait(c, &s);
        }
    }
    mg_mesh_free(mesh);
}
END_TEST

static Suite *make_suite(void) {
    world = mg_world_size();
    const TTest *tests[] = {ring_exchange, messages_meet_in_order, refusals, NULL};
    return mg_test_suite("p2p", tests);
}

int main(int argc, char **argv) { return mg_test_main_mpi(&argc, &argv, make_suite, NULL); }
