/* test_comm.c (MPI): the collectives of comm.h on the world and on every mesh
 * dim of every mesh the world size allows, against naive results (rank r holds
 * integer values, so sums are exact); the split paths for counts above the
 * per-call limit; the byte counters against the documented definition; one-rank
 * communicators; status agreement; an MPI failure reported as MG_ECOMM; the
 * non-blocking sum (mg_comm_iall_reduce/test/wait) with several in flight,
 * and with more in flight than there are rings or slots, polled in any order;
 * shared memory: per-rank buffers summed in place, one copy for all, and the
 * comm's two scratch buffers handed out in turn; the deterministic mode's sums
 * (all_reduce, iall_reduce, reduce_scatter): every rank's result bitwise the
 * binary tree over the ranks' parts in rank order, whose values make float
 * sums depend on their order. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/comm.h"
#include "status.h"
#include "test_dist.h"
#include "testutil.h"

static int world;

static float val(int rank, int64_t i) { return (float)((rank + 1) * 1000 + i % 997); }

/* Runs every collective on c with n floats per block; returns 1 if all match. */
static int check_collectives(mg_comm *c, int64_t n, char *msg, size_t len) {
    int k = c->size, me = c->rank;
    float *buf = malloc((size_t)(k * n + 1) * sizeof(float));
    float *out = malloc((size_t)(k * n + 1) * sizeof(float));
    int ok = 1;
#define FAIL(...)                                                                                  \
    do {                                                                                           \
        if (ok) snprintf(msg, len, __VA_ARGS__);                                                   \
        ok = 0;                                                                                    \
    } while (0)
    /* all_reduce sum / avg / max */
    for (int op = 0; op < 3; op++) {
        for (int64_t i = 0; i < n; i++) buf[i] = val(me, i);
        if (mg_comm_all_reduce(c, buf, n, (mg_reduce_op)op) != MG_OK)
            FAIL("all_reduce: %s", mg_last_error());
        for (int64_t i = 0; i < n && ok; i++) {
            double want = 0, mx = -1e30;
            for (int r = 0; r < k; r++) {
                want += val(r, i);
                if (val(r, i) > mx) mx = val(r, i);
            }
            if (op == MG_REDUCE_AVG) want = (float)want * (1.0f / (float)k);
            if (op == MG_REDUCE_MAX) want = mx;
            if (buf[i] != (float)want)
                FAIL("all_reduce op %d element %lld: %g want %g", op, (long long)i, buf[i], want);
        }
    }
    /* all_gather, out of place and in place */
    for (int inplace = 0; inplace < 2; inplace++) {
        for (int64_t i = 0; i < n; i++) buf[i] = val(me, i);
        const float *send = buf;
        if (inplace) {
            memcpy(out + me * n, buf, (size_t)n * sizeof(float));
            send = out + me * n;
        }
        if (mg_comm_all_gather(c, send, n, out) != MG_OK) FAIL("all_gather: %s", mg_last_error());
        for (int r = 0; r < k && ok; r++)
            for (int64_t i = 0; i < n; i++)
                if (out[r * n + i] != val(r, i)) {
                    FAIL("all_gather (in place %d) block %d element %lld", inplace, r,
                         (long long)i);
                    break;
                }
    }
    /* reduce_scatter: block r of rank q holds val(q, r*n + i) */
    for (int64_t i = 0; i < k * n; i++) buf[i] = val(me, i);
    if (mg_comm_reduce_scatter(c, buf, out, n) != MG_OK)
        FAIL("reduce_scatter: %s", mg_last_error());
    for (int64_t i = 0; i < n && ok; i++) {
        double want = 0;
        for (int q = 0; q < k; q++) want += val(q, me * n + i);
        if (out[i] != (float)want)
            FAIL("reduce_scatter element %lld: %g want %g", (long long)i, out[i], want);
    }
    /* all_to_all: block r of rank q is val(q, r*n + i); block q of my output comes from q */
    for (int64_t i = 0; i < k * n; i++) buf[i] = val(me, i);
    if (mg_comm_all_to_all(c, buf, n, out) != MG_OK) FAIL("all_to_all: %s", mg_last_error());
    for (int q = 0; q < k && ok; q++)
        for (int64_t i = 0; i < n; i++)
            if (out[q * n + i] != val(q, me * n + i)) {
                FAIL("all_to_all block %d element %lld", q, (long long)i);
                break;
            }
    /* broadcast from every root */
    for (int root = 0; root < k; root++) {
        for (int64_t i = 0; i < n; i++) buf[i] = val(me, i);
        if (mg_comm_broadcast(c, buf, n, root) != MG_OK) FAIL("broadcast: %s", mg_last_error());
        for (int64_t i = 0; i < n && ok; i++)
            if (buf[i] != val(root, i)) FAIL("broadcast root %d element %lld", root, (long long)i);
    }
    if (mg_comm_barrier(c) != MG_OK) FAIL("barrier: %s", mg_last_error());
#undef FAIL
    free(buf);
    free(out);
    return ok;
}

/* check(c, n, ...) on the world and every dim of every mesh of the world. */
static void check_every_comm(int (*check)(mg_comm *c, int64_t n, char *msg, size_t len),
                             int64_t n) {
    test_mesh_shape ms[16];
    int nm = test_meshes(world, 4, ms);
    for (int m = 0; m < nm; m++) {
        mg_mesh *mesh = mg_mesh_new(ms[m].ndim, ms[m].shape);
        mg_assert_all(mesh != NULL, "mesh: %s", mg_last_error());
        char msg[256] = "", mt[32];
        mg_mesh_format(mt, sizeof mt, mesh);
        mg_assert_all(check(mesh->world, n, msg, sizeof msg), "mesh %s world, n %lld: %s", mt,
                      (long long)n, msg);
        for (int i = 0; i < mesh->ndim; i++)
            mg_assert_all(check(mesh->dim_comm[i], n, msg, sizeof msg),
                          "mesh %s dim %d, n %lld: %s", mt, i, (long long)n, msg);
        mg_mesh_free(mesh);
    }
}

static void check_all_comms(int64_t n) { check_every_comm(check_collectives, n); }

START_TEST(collectives_match_naive) {
    check_all_comms(1);
    check_all_comms(37);
    check_all_comms(4096);
}
END_TEST

/* Three non-blocking sums started back to back on c, polled, then waited for:
 * returns 1 if the results are the naive sums and the counters moved by 3. */
static int check_iall_reduce(mg_comm *c, int64_t unused, char *msg, size_t len) {
    (void)unused; /* its sizes are its own */
    static const int64_t sizes[3] = {1, 1000, 300000};
    int k = c->size, me = c->rank, ok = 1;
    float *buf[3];
    mg_comm_request req[3];
    mg_comm_stats s0[MG_COLL_COUNT], s1[MG_COLL_COUNT];
#define FAIL(...)                                                                                  \
    do {                                                                                           \
        if (ok) snprintf(msg, len, __VA_ARGS__);                                                   \
        ok = 0;                                                                                    \
    } while (0)
    mg_comm_stats_get(s0);
    for (int j = 0; j < 3; j++) {
        buf[j] = malloc((size_t)sizes[j] * sizeof(float));
        for (int64_t i = 0; i < sizes[j]; i++) buf[j][i] = val(me, i + j);
        if (mg_comm_iall_reduce(c, buf[j], sizes[j], &req[j]) != MG_OK)
            FAIL("iall_reduce %d: %s", j, mg_last_error());
        if (k == 1 && !req[j].done) FAIL("one rank: request %d not done at once", j);
        for (int q = 0; q <= j; q++)
            if (mg_comm_test(c, &req[q]) != MG_OK) FAIL("test %d: %s", q, mg_last_error());
    }
    for (int round = 0; round < 3; round++)
        for (int j = 2; j >= 0; j--)
            if (mg_comm_test(c, &req[j]) != MG_OK) FAIL("test %d: %s", j, mg_last_error());
    for (int j = 0; j < 3; j++) {
        if (mg_comm_wait(c, &req[j]) != MG_OK) FAIL("wait %d: %s", j, mg_last_error());
        if (!req[j].done) FAIL("request %d not done after wait", j);
        /* a second wait and test on a finished request are no-ops */
        if (mg_comm_wait(c, &req[j]) != MG_OK || mg_comm_test(c, &req[j]) != MG_OK)
            FAIL("wait/test after completion: %s", mg_last_error());
    }
    for (int j = 0; j < 3; j++) {
        for (int64_t i = 0; i < sizes[j] && ok; i++) {
            double want = 0;
            for (int r = 0; r < k; r++) want += val(r, i + j);
            if (buf[j][i] != (float)want)
                FAIL("sum %d (n %lld) element %lld: %g want %g", j, (long long)sizes[j],
                     (long long)i, buf[j][i], want);
        }
        free(buf[j]);
    }
    mg_comm_stats_get(s1);
    int64_t want_bytes = 0;
    for (int j = 0; j < 3; j++)
        want_bytes += mg_coll_bytes(MG_COLL_ALL_REDUCE, k, me, sizes[j], 0);
    if (k == 1 && want_bytes != 0) FAIL("one rank: %lld bytes expected", (long long)want_bytes);
    int64_t dc = s1[MG_COLL_ALL_REDUCE].calls - s0[MG_COLL_ALL_REDUCE].calls,
            db = s1[MG_COLL_ALL_REDUCE].bytes - s0[MG_COLL_ALL_REDUCE].bytes;
    if (dc != 3) FAIL("all_reduce calls went up by %lld, want 3", (long long)dc);
    if (db != want_bytes)
        FAIL("all_reduce bytes went up by %lld, want %lld", (long long)db, (long long)want_bytes);
    for (int kind = 0; kind < MG_COLL_COUNT; kind++)
        if (kind != MG_COLL_ALL_REDUCE && s1[kind].calls != s0[kind].calls)
            FAIL("%s was counted", mg_coll_name(kind));
#undef FAIL
    return ok;
}

START_TEST(iall_reduce_matches_naive) {
    check_every_comm(check_iall_reduce, 0);
    /* counts above the per-call limit run blocking: done at return, still exact */
    mg_comm_mpi_set_max_count(4);
    int one[1] = {world};
    mg_mesh *mesh = mg_mesh_new(1, one);
    float x[10];
    for (int i = 0; i < 10; i++) x[i] = val(mg_rank(), i);
    mg_comm_request req;
    int rc = mg_comm_iall_reduce(mesh->world, x, 10, &req);
    mg_comm_mpi_set_max_count(0);
    mg_assert_all(rc == MG_OK && req.done, "split iall_reduce: rc %d done %d", rc, req.done);
    int ok = 1;
    for (int i = 0; i < 10; i++) {
        double want = 0;
        for (int r = 0; r < world; r++) want += val(r, i);
        ok &= x[i] == (float)want;
    }
    mg_assert_all(ok, "split iall_reduce: wrong sums");
    mg_mesh_free(mesh);
}
END_TEST

/* More sums in flight than the comm has rings or shared-memory slots (8 each),
 * on ordinary and on shared buffers, each rank polling them in its own order
 * and an odd rank sleeping in between: whichever sums finish first on a rank,
 * every rank must start the same rings and barriers in the same order, and
 * every sum must be exact. */
START_TEST(many_sums_in_flight) {
    enum { SUMS = 20, N = 3001 };
    int one[1] = {world};
    mg_mesh *mesh = mg_mesh_new(1, one);
    mg_comm *c = mesh->world;
    for (int shared = 0; shared < 2; shared++) {
        float *heap = shared ? NULL : malloc(sizeof(float) * SUMS * N);
        float *buf = shared ? mg_comm_alloc_shared(c, SUMS * N) : heap;
        if (shared && !buf) break; /* one rank: no shared memory */
        mg_comm_request req[SUMS];
        for (int b = 0; b < SUMS; b++) {
            for (int64_t i = 0; i < N; i++) buf[b * N + i] = val(c->rank, b * N + i);
            mg_assert_all(mg_comm_iall_reduce(c, buf + b * N, N, &req[b]) == MG_OK, "%s",
                          mg_last_error());
            for (int t = 0; t <= b; t++) /* odd ranks poll newest first */
                mg_comm_test(c, &req[c->rank % 2 ? b - t : t]);
            if (c->rank % 2 && b % 3 == 0) usleep(2000);
        }
        for (int b = SUMS - 1; b >= 0; b--)
            mg_assert_all(mg_comm_wait(c, &req[b]) == MG_OK, "wait: %s", mg_last_error());
        int ok = 1;
        for (int64_t i = 0; i < (int64_t)SUMS * N; i++) {
            double want = 0;
            for (int r = 0; r < c->size; r++) want += val(r, i);
            ok &= buf[i] == (float)want;
        }
        mg_assert_all(ok, "%s buffers: a sum in flight with %d others went wrong",
                      shared ? "shared" : "ordinary", SUMS - 1);
        free(heap);
    }
    mg_mesh_free(mesh);
}
END_TEST

/* check(c, mesh text, comm index: -1 for the world) on the world and every
 * mesh dim of every mesh the world size allows. */
static void for_each_comm(void (*check)(mg_comm *c, const char *mt, int ci)) {
    test_mesh_shape ms[16];
    int nm = test_meshes(world, 4, ms);
    for (int m = 0; m < nm; m++) {
        mg_mesh *mesh = mg_mesh_new(ms[m].ndim, ms[m].shape);
        mg_assert_all(mesh != NULL, "mesh: %s", mg_last_error());
        char mt[32];
        mg_mesh_format(mt, sizeof mt, mesh);
        for (int ci = -1; ci < mesh->ndim; ci++)
            check(ci < 0 ? mesh->world : mesh->dim_comm[ci], mt, ci);
        mg_mesh_free(mesh);
    }
}

/* Buffers from mg_comm_alloc_shared (a shared window: every rank of these
 * comms is on this node) are summed in place through shared memory: exact
 * sums, an offset part of a buffer, several in flight; every rank gets the
 * same bits. A 1-rank comm has no shared memory to offer. */
static void shared_sums_on(mg_comm *c, const char *mt, int ci) {
    const int64_t n[3] = {1, 1001, 300000};
    float *buf[3];
    int shared = 1;
    for (int b = 0; b < 3; b++) {
        buf[b] = mg_comm_alloc_shared(c, n[b] + 7);
        shared &= buf[b] != NULL;
    }
    mg_assert_all(mg_last_code() == MG_OK, "mesh %s comm %d: %s", mt, ci, mg_last_error());
    mg_assert_all(shared == (c->size > 1), "mesh %s comm %d (%d ranks): shared memory %s",
                  mt, ci, c->size, shared ? "offered" : "missing");
    if (!shared) return;
    mg_comm_request req[3];
    for (int b = 0; b < 3; b++) {
        for (int64_t i = 0; i < n[b] + 7; i++) buf[b][i] = val(c->rank, i);
        mg_assert_all(mg_comm_iall_reduce(c, buf[b] + 7, n[b], &req[b]) == MG_OK, "%s",
                      mg_last_error());
        mg_assert_all(req[b].shm == 1, "mesh %s comm %d: a shared buffer went by messages",
                      mt, ci);
        mg_comm_test(c, &req[0]);
    }
    for (int b = 2; b >= 0; b--) mg_assert_all(mg_comm_wait(c, &req[b]) == MG_OK, "wait");
    int ok = 1;
    for (int b = 0; b < 3; b++)
        for (int64_t i = 0; i < n[b] + 7; i++) {
            double want = 0;
            for (int r = 0; r < c->size; r++) want += val(r, i);
            ok &= buf[b][i] == (float)(i < 7 ? val(c->rank, i) : want);
        }
    mg_assert_all(ok, "mesh %s comm %d: shared sums wrong (or the 7 floats before the "
                  "summed part were touched)", mt, ci);
}

START_TEST(shared_sums_match_naive) { for_each_comm(shared_sums_on); }
END_TEST

/* mg_comm_alloc_shared_one: one buffer that every rank of the comm maps (the
 * same address through mg_comm_shared_peer for every rank); each rank writes
 * its own slice and, after a barrier, reads every other rank's. Summing it is
 * refused: it is one value, not one per rank. */
static void shared_one_copy_on(mg_comm *c, const char *mt, int ci) {
    const int64_t n = 100003;
    float *x = mg_comm_alloc_shared_one(c, n);
    mg_assert_all(mg_last_code() == MG_OK, "mesh %s comm %d: %s", mt, ci, mg_last_error());
    mg_assert_all((x != NULL) == (c->size > 1), "mesh %s comm %d (%d ranks): one copy %s", mt,
                  ci, c->size, x ? "offered" : "missing");
    if (!x) return;
    int same = 1;
    for (int q = 0; q < c->size; q++) same &= mg_comm_shared_peer(c, x, n, q) == x;
    mg_assert_all(same, "mesh %s comm %d: a rank's view of the one copy is elsewhere", mt, ci);
    int64_t lo = (int64_t)c->rank * n / c->size, hi = (int64_t)(c->rank + 1) * n / c->size;
    for (int64_t i = lo; i < hi; i++) x[i] = val(c->rank, i);
    mg_assert_all(mg_comm_barrier(c) == MG_OK, "barrier: %s", mg_last_error());
    int ok = 1;
    for (int q = 0; q < c->size; q++)
        for (int64_t i = (int64_t)q * n / c->size; i < (int64_t)(q + 1) * n / c->size; i++)
            ok &= x[i] == val(q, i);
    mg_assert_all(ok, "mesh %s comm %d: another rank's slice did not arrive", mt, ci);
    mg_comm_request req;
    mg_assert_all(mg_comm_iall_reduce(c, x, n, &req) == MG_EINVAL && req.done,
                  "mesh %s comm %d: a sum of the one copy was not refused", mt, ci);
    mg_assert_all(mg_comm_barrier(c) == MG_OK, "barrier: %s", mg_last_error());
    /* the comm's scratch: two one-copy buffers in turn, grown on demand */
    float *s0 = mg_comm_shared_scratch(c, 1000), *s1 = mg_comm_shared_scratch(c, 1000);
    float *s2 = mg_comm_shared_scratch(c, 1000), *s3 = mg_comm_shared_scratch(c, 5000);
    mg_assert_all(s0 && s1 && s2 && s3 && s0 != s1 && s2 == s0 && s3 != s1,
                  "mesh %s comm %d: scratch not two buffers in turn (grown when asked)", mt, ci);
    same = 1;
    for (int q = 0; q < c->size; q++) same &= mg_comm_shared_peer(c, s3, 5000, q) == s3;
    mg_assert_all(same, "mesh %s comm %d: the scratch is not one copy", mt, ci);
    s3[c->rank] = (float)c->rank;
    mg_assert_all(mg_comm_barrier(c) == MG_OK, "barrier: %s", mg_last_error());
    ok = 1;
    for (int q = 0; q < c->size; q++) ok &= s3[q] == (float)q;
    mg_assert_all(ok, "mesh %s comm %d: the scratch did not carry every rank's store", mt, ci);
    mg_assert_all(mg_comm_barrier(c) == MG_OK, "barrier: %s", mg_last_error());
}

START_TEST(shared_one_copy) { for_each_comm(shared_one_copy_on); }
END_TEST

START_TEST(split_calls_match_naive) {
    mg_comm_mpi_set_max_count(4);
    check_all_comms(10); /* pieces of 4, 4, 2 */
    check_all_comms(3);  /* under the limit */
    check_all_comms(8);  /* exactly two pieces */
    mg_comm_mpi_set_max_count(0);
}
END_TEST

START_TEST(byte_counters) {
    mg_comm_stats s[MG_COLL_COUNT];
    test_mesh_shape ms[16];
    int nm = test_meshes(world, 2, ms);
    for (int m = 0; m < nm; m++) {
        mg_mesh *mesh = mg_mesh_new(ms[m].ndim, ms[m].shape);
        for (int ci = -1; ci < mesh->ndim; ci++) {
            mg_comm *c = ci < 0 ? mesh->world : mesh->dim_comm[ci];
            int64_t k = c->size, n = 12;
            float *buf = calloc((size_t)(k * n), sizeof(float)),
                  *out = calloc((size_t)(k * n), sizeof(float));
            mg_comm_stats_reset();
            mg_comm_stats_get(s);
            for (int kind = 0; kind < MG_COLL_COUNT; kind++)
                mg_assert_all(s[kind].calls == 0 && s[kind].bytes == 0, "reset left counts");
            mg_comm_all_reduce(c, buf, n, MG_REDUCE_SUM);
            mg_comm_all_reduce(c, buf, n, MG_REDUCE_SUM);
            mg_comm_all_gather(c, buf, n, out);
            mg_comm_reduce_scatter(c, out, buf, n);
            mg_comm_all_to_all(c, out, n, buf);
            mg_comm_broadcast(c, buf, n, 0);
            mg_comm_barrier(c);
            mg_comm_stats_get(s);
            int64_t b = n * 4;
            int64_t want_bytes[MG_COLL_COUNT] = {2 * (2 * (k - 1) * b / k),
                                                 (k - 1) * b,
                                                 (k - 1) * b,
                                                 (k - 1) * b,
                                                 c->rank == (int)(k - 1) ? 0 : b,
                                                 0};
            int64_t want_calls[MG_COLL_COUNT] = {2, 1, 1, 1, 1, 1};
            if (k == 1) want_bytes[MG_COLL_BROADCAST] = 0;
            for (int kind = 0; kind < MG_COLL_COUNT; kind++) {
                mg_assert_all(s[kind].calls == want_calls[kind], "%s calls %lld, want %lld",
                              mg_coll_name(kind), (long long)s[kind].calls,
                              (long long)want_calls[kind]);
                mg_assert_all(s[kind].bytes == want_bytes[kind],
                              "%s on %lld ranks: bytes %lld, want %lld", mg_coll_name(kind),
                              (long long)k, (long long)s[kind].bytes, (long long)want_bytes[kind]);
                mg_assert_all(s[kind].bytes ==
                                  want_calls[kind] * mg_coll_bytes(kind, (int)k, c->rank, n, 0),
                              "mg_coll_bytes disagrees for %s", mg_coll_name(kind));
            }
            free(buf);
            free(out);
        }
        mg_mesh_free(mesh);
    }
    /* counters of freed meshes still count */
    mg_comm_stats_reset();
    int one[1] = {world};
    mg_mesh *mesh = mg_mesh_new(1, one);
    float x[4] = {1, 2, 3, 4};
    mg_comm_all_reduce(mesh->dim_comm[0], x, 4, MG_REDUCE_SUM);
    mg_mesh_free(mesh);
    mg_comm_stats_get(s);
    mg_assert_all(s[MG_COLL_ALL_REDUCE].calls == 1, "freed mesh's counters lost");
    ck_assert_str_eq(mg_coll_name(MG_COLL_REDUCE_SCATTER), "reduce_scatter");
    ck_assert_str_eq(mg_coll_name(MG_COLL_COUNT), "unknown");
    /* the MG_COMM_DEBUG table */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    mg_comm_stats_print(f);
    fclose(f);
    mg_assert_all(strstr(text, "all_reduce") && strstr(text, "total"), "table: %s", text);
    free(text);
}
END_TEST

START_TEST(one_rank_comm_moves_nothing) {
    mg_comm *c = mg_comm_mpi_new(MPI_COMM_SELF);
    ck_assert_ptr_nonnull(c);
    mg_comm_register(c);
    mg_comm_stats_reset();
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {0};
    ck_assert_int_eq(mg_comm_all_reduce(c, a, 5, MG_REDUCE_AVG), MG_OK);
    ck_assert(a[4] == 5);
    ck_assert_int_eq(mg_comm_all_gather(c, a, 5, b), MG_OK);
    ck_assert(b[3] == 4);
    memset(b, 0, sizeof b);
    ck_assert_int_eq(mg_comm_reduce_scatter(c, a, b, 5), MG_OK);
    ck_assert(b[2] == 3);
    memset(b, 0, sizeof b);
    ck_assert_int_eq(mg_comm_all_to_all(c, a, 5, b), MG_OK);
    ck_assert(b[0] == 1);
    ck_assert_int_eq(mg_comm_broadcast(c, a, 5, 0), MG_OK);
    mg_comm_stats s[MG_COLL_COUNT];
    mg_comm_stats_get(s);
    for (int k = 0; k < MG_COLL_COUNT; k++) ck_assert_int_eq(s[k].bytes, 0);
    ck_assert_int_eq(s[MG_COLL_ALL_GATHER].calls, 1);
    /* refusals */
    ck_assert_int_eq(mg_comm_broadcast(c, a, 5, 1), MG_EINVAL);
    ck_assert_int_eq(mg_comm_all_reduce(c, a, -1, MG_REDUCE_SUM), MG_EINVAL);
    mg_comm_free(c);
}
END_TEST

START_TEST(status_agreement) {
    int me = mg_rank(), where = 7;
    ck_assert_int_eq(mg_status_agree(MG_OK), MG_OK);
    ck_assert_int_eq(mg_status_agree_rank(MG_OK, &where), MG_OK);
    ck_assert_int_eq(where, -1);
    /* the last rank fails with MG_EIO, rank 0 with MG_ESHAPE: MG_EIO (most negative) wins */
    int mine = me == world - 1 ? MG_EIO : me == 0 ? MG_ESHAPE : MG_OK;
    ck_assert_int_eq(mg_status_agree_rank(mine, &where), world == 1 ? MG_EIO : MG_EIO);
    ck_assert_int_eq(where, world - 1);
    mine = me == world - 1 ? MG_EFORMAT : MG_OK;
    ck_assert_int_eq(mg_status_agree(mine), MG_EFORMAT);
}
END_TEST

START_TEST(mpi_failure_is_ecomm) {
    /* a communicator MPI rejects: the MPI iface returns MG_ECOMM with MPI's text
     * (called directly: the counting wrapper would look the communicator up) */
    mg_comm *c = mg_comm_mpi_new(MPI_COMM_SELF);
    c->mpi = MPI_COMM_NULL;
    c->size = 2;
    float x[2] = {1, 2};
    int rc = c->iface->all_reduce(c, x, 2, MG_REDUCE_SUM);
    ck_assert_int_eq(rc, MG_ECOMM);
    ck_assert_msg(strstr(mg_last_error(), "all_reduce over 2 ranks failed: ") != NULL, "%s",
                  mg_last_error());
    mg_comm_free(c);
    /* and the library keeps working */
    check_all_comms(5);
}
END_TEST

/* Rank r's part of a sum whose float order shows: magnitudes 2^-20 .. 2^20. */
static float wide(int rank, int64_t i) {
    unsigned h = (unsigned)(rank * 7919 + i * 104729 + 17) * 2654435761u;
    float m = 1.0f + (float)(h % 8191) / 8191.0f;
    int e = (int)(h >> 20) % 41 - 20;
    return (h & 1 ? -1.0f : 1.0f) * ldexpf(m, e);
}

/* The tree ((p0 + p1) + (p2 + p3)) over k parts of element i, split at the
 * largest power of two below the count. */
static float tree_of(int lo, int hi, int64_t i, int64_t col) {
    if (hi - lo == 1) return wide(lo, col);
    int h = 1;
    while (2 * h < hi - lo) h *= 2;
    (void)i;
    return tree_of(lo, lo + h, i, col) + tree_of(lo + h, hi, i, col);
}

static int check_tree_sums(mg_comm *c, int64_t n, char *msg, size_t len) {
    int k = c->size, me = c->rank, ok = 1;
    float *buf = malloc((size_t)(k * n + 1) * sizeof(float)), *out = malloc((size_t)(n + 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) buf[i] = wide(me, i);
    ok &= mg_comm_all_reduce(c, buf, n, MG_REDUCE_SUM) == MG_OK;
    for (int64_t i = 0; i < n && ok; i++)
        if (buf[i] != tree_of(0, k, i, i)) {
            snprintf(msg, len, "all_reduce element %lld: %.9g, the tree gives %.9g", (long long)i,
                     buf[i], tree_of(0, k, i, i));
            ok = 0;
        }
    mg_comm_request req;
    for (int64_t i = 0; i < n; i++) buf[i] = wide(me, i);
    ok &= mg_comm_iall_reduce(c, buf, n, &req) == MG_OK && mg_comm_wait(c, &req) == MG_OK;
    for (int64_t i = 0; i < n && ok; i++)
        if (buf[i] != tree_of(0, k, i, i)) {
            snprintf(msg, len, "iall_reduce element %lld differs from the tree", (long long)i);
            ok = 0;
        }
    /* reduce_scatter: block j of rank r's send holds wide(r, j n + i) */
    for (int64_t i = 0; i < k * n; i++) buf[i] = wide(me, i);
    ok &= mg_comm_reduce_scatter(c, buf, out, n) == MG_OK;
    for (int64_t i = 0; i < n && ok; i++)
        if (out[i] != tree_of(0, k, i, me * n + i)) {
            snprintf(msg, len, "reduce_scatter element %lld differs from the tree", (long long)i);
            ok = 0;
        }
    free(buf), free(out);
    return ok;
}

START_TEST(deterministic_sums_are_the_tree) {
    ck_assert_int_eq(mg_set_deterministic(1), MG_OK);
    check_every_comm(check_tree_sums, 1);
    check_every_comm(check_tree_sums, 1000);
    ck_assert_int_eq(mg_set_deterministic(0), MG_OK);
    /* the parts' values tell a tree from a chain ((p0 + p1) + p2) + p3 */
    int differ = 0;
    for (int i = 0; i < 1000; i++) {
        float chain = 0;
        for (int r = 0; r < 4; r++) chain += wide(r, i);
        differ += chain != tree_of(0, 4, i, i);
    }
    ck_assert_msg(differ > 0, "4 parts: the chain equals the tree on every element");
}
END_TEST

static Suite *make_suite(void) {
    world = mg_world_size();
    const TTest *tests[] = {collectives_match_naive, split_calls_match_naive,
                            shared_sums_match_naive, shared_one_copy, iall_reduce_matches_naive,
                            many_sums_in_flight, byte_counters, one_rank_comm_moves_nothing,
                            status_agreement, mpi_failure_is_ecomm,
                            deterministic_sums_are_the_tree, NULL};
    return mg_test_suite("comm", tests);
}

int main(int argc, char **argv) { return mg_test_main_mpi(&argc, &argv, make_suite, NULL); }
