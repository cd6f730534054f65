/* comm_control.c: control messages over a communicator, for the layers above
 * dist/ that must agree on something (a status, a flag, a file name, the exit
 * code) without a raw MPI call of their own: a byte broadcast, all-reduces of
 * a few int64 or double values (sum, min, max), sums of int64 values and of
 * exact sums (exact.h: integers, added in any order) and an agreement that can
 * give up after a deadline. They always use host memory and the comm's MPI
 * communicator (also for an NCCL comm), are counted in the comm's statistics
 * (as broadcast and all_reduce, bytes as for floats of the same size) and
 * block under the collective watchdog, as the calls of comm.c do. A comm of
 * one rank makes no MPI call.
 * Also the world comm: one mg_comm over MPI_COMM_WORLD for code that has no
 * mesh at hand (the program's exit code, checkpoints, data sets, flags).
 * Exports: mg_comm_world, mg_comm_broadcast_bytes, mg_comm_all_reduce_i64, mg_comm_sum_i64,
 * mg_comm_sum_exact, mg_comm_all_reduce_f64, mg_comm_agree_max, mg_comm_gather_bytes,
 * mg_comm_abort. */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dist/comm.h"
#include "dist/dist_state.h"
#include "dist/flight.h"
#include "dist/watchdog.h"
#include "exact.h"
#include "status.h"

/* The context's world comm: made on first use, registered so its counters are
 * summed, freed by mg_finalize. */
mg_comm *mg_comm_world(void) {
    mg_dist_state *c = mg_dist();
    if (c->world) return c->world;
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized)
        return mg_error_null(MG_ESTATE, "the world communicator needs MPI: call mg_init first");
    c->world = mg_comm_mpi_new(MPI_COMM_WORLD);
    if (c->world) mg_comm_register(c->world);
    return c->world;
}

static double seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int failed(const mg_comm *c, const char *what, int err) {
    return mg_mpi_failed(err, "%s over %d ranks failed", what, c->size);
}

/* Counts one call of `kind` moving `bytes` (rounded up to whole floats) and
 * records it in the flight recorder: its record, or MG_FLIGHT_SKIP (the test
 * hook skips it). */
static int64_t count(mg_comm *c, mg_coll_kind kind, int64_t bytes, int root,
                     mg_flight_dtype dtype) {
    c->stats[kind].calls++;
    c->stats[kind].bytes += mg_coll_bytes(kind, c->size, c->rank, (bytes + 3) / 4, root);
    if (c->meta) return MG_FLIGHT_SKIP; /* counted, never run: a meta comm's values stay */
    return mg_flight_post(c->mpi, mg_coll_name(kind), bytes, dtype, -1, 0, true);
}

/* The call returned: disarm the watchdog, close the record. */
static int finished(int64_t f, int err) {
    mg_watchdog_end();
    mg_flight_done(f);
    return err;
}

int mg_comm_broadcast_bytes(mg_comm *c, void *buf, int64_t n, int root) {
    if (n < 0 || n > (1 << 30) || root < 0 || root >= c->size)
        return mg_error(MG_EINVAL, "broadcast of %lld bytes from root %d over %d ranks: bad "
                        "arguments", (long long)n, root, c->size);
    int64_t f = count(c, MG_COLL_BROADCAST, n, root, MG_FLIGHT_BYTE);
    if (f == MG_FLIGHT_SKIP) return MG_OK;
    if (c->size == 1 || n == 0) {
        mg_flight_done(f);
        return MG_OK;
    }
    mg_watchdog_begin_comm("broadcast", c->mpi);
    int err = finished(f, MPI_Bcast(buf, (int)n, MPI_BYTE, root, c->mpi));
    return err == MPI_SUCCESS ? MG_OK : failed(c, "broadcast", err);
}

static int all_reduce_any(mg_comm *c, void *buf, int n, MPI_Datatype type, mg_control_op op) {
    int64_t f = count(c, MG_COLL_ALL_REDUCE, 8 * (int64_t)n, 0,
                      type == MPI_DOUBLE ? MG_FLIGHT_FLOAT64 : MG_FLIGHT_INT64);
    if (f == MG_FLIGHT_SKIP) return MG_OK;
    if (c->size == 1 || n == 0) {
        mg_flight_done(f);
        return MG_OK;
    }
    MPI_Op mop = op == MG_CONTROL_SUM ? MPI_SUM : op == MG_CONTROL_MIN ? MPI_MIN : MPI_MAX;
    mg_watchdog_begin_comm("all_reduce", c->mpi);
    int err = finished(f, MPI_Allreduce(MPI_IN_PLACE, buf, n, type, mop, c->mpi));
    return err == MPI_SUCCESS ? MG_OK : failed(c, "all_reduce", err);
}

static int all_reduce(mg_comm *c, void *buf, int n, MPI_Datatype type, mg_control_op op) {
    if (n < 0 || n > 64 || op < MG_CONTROL_SUM || op > MG_CONTROL_MAX)
        return mg_error(MG_EINVAL, "control all_reduce of %d values (op %d): at most 64 values, "
                        "op sum, min or max", n, (int)op);
    return all_reduce_any(c, buf, n, type, op);
}

int mg_comm_sum_i64(mg_comm *c, int64_t *buf, int64_t n) {
    if (n < 0 || n > INT_MAX)
        return mg_error(MG_EINVAL, "integer sum of %lld values: 0 to %d", (long long)n, INT_MAX);
    return all_reduce_any(c, buf, (int)n, MPI_INT64_T, MG_CONTROL_SUM);
}

int mg_comm_sum_exact(mg_comm *c, mg_exact *a) {
    mg_exact_normalize(a); /* digits below 2^32: the ranks' sum cannot overflow */
    int64_t w[MG_EXACT_WORDS];
    memcpy(w, a->d, sizeof a->d);
    w[MG_EXACT_DIGITS] = a->nan, w[MG_EXACT_DIGITS + 1] = a->pos_inf;
    w[MG_EXACT_DIGITS + 2] = a->neg_inf, w[MG_EXACT_DIGITS + 3] = 0;
    int rc = mg_comm_sum_i64(c, w, MG_EXACT_WORDS);
    if (rc != MG_OK) return rc;
    memcpy(a->d, w, sizeof a->d);
    a->nan = w[MG_EXACT_DIGITS], a->pos_inf = w[MG_EXACT_DIGITS + 1];
    a->neg_inf = w[MG_EXACT_DIGITS + 2], a->pending = 0;
    return MG_OK;
}

int mg_comm_all_reduce_i64(mg_comm *c, int64_t *buf, int n, mg_control_op op) {
    return all_reduce(c, buf, n, MPI_INT64_T, op);
}

int mg_comm_all_reduce_f64(mg_comm *c, double *buf, int n, mg_control_op op) {
    return all_reduce(c, buf, n, MPI_DOUBLE, op);
}

int mg_comm_agree_max(mg_comm *c, int64_t *vals, int n, double wait_s) {
    if (n < 0 || n > 8) return mg_error(MG_EINVAL, "agree: %d values, at most 8", n);
    int64_t f = count(c, MG_COLL_ALL_REDUCE, 8 * (int64_t)n, 0, MG_FLIGHT_INT64);
    if (f == MG_FLIGHT_SKIP) return MG_OK;
    if (c->size == 1 || n == 0) {
        mg_flight_done(f);
        return MG_OK;
    }
    int64_t mine[8];
    memcpy(mine, vals, (size_t)n * sizeof *mine);
    MPI_Request req;
    int err = MPI_Iallreduce(mine, vals, n, MPI_INT64_T, MPI_MAX, c->mpi, &req);
    if (err != MPI_SUCCESS) {
        mg_flight_done(f);
        return failed(c, "agreement", err);
    }
    if (wait_s < 0) {
        mg_watchdog_begin_comm("all_reduce", c->mpi);
        err = finished(f, MPI_Wait(&req, MPI_STATUS_IGNORE));
        return err == MPI_SUCCESS ? MG_OK : failed(c, "agreement", err);
    }
    double deadline = seconds() + wait_s;
    for (;;) {
        int done = 0;
        err = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (err != MPI_SUCCESS || done) mg_flight_done(f);
        if (err != MPI_SUCCESS) return failed(c, "agreement", err);
        if (done) return MG_OK;
        if (seconds() > deadline)
            return mg_error(MG_ECOMM, "the other ranks did not reach the agreement within %g s",
                            wait_s);
        struct timespec pause = {0, 1000000}; /* 1 ms */
        nanosleep(&pause, NULL);
    }
}

int mg_comm_gather_bytes(mg_comm *c, const void *buf, int64_t n, int root, char **out,
                         int64_t *counts) {
    *out = NULL;
    if (n < 0 || n > (1 << 30) || root < 0 || root >= c->size)
        return mg_error(MG_EINVAL, "gather of %lld bytes to root %d over %d ranks: bad arguments",
                        (long long)n, root, c->size);
    c->stats[MG_COLL_ALL_GATHER].calls++;
    c->stats[MG_COLL_ALL_GATHER].bytes += c->rank == root ? 0 : n;
    if (c->meta) return MG_OK;
    int64_t f = mg_flight_post(c->mpi, "gather", n, MG_FLIGHT_BYTE, -1, 0, true);
    if (f == MG_FLIGHT_SKIP) return MG_OK;
    mg_watchdog_begin_comm("gather", c->mpi);
    int *sizes = NULL, *at = NULL, rc = MG_OK;
    int64_t total = 0, ok = 1;
    int err = MPI_Gather(&n, 1, MPI_INT64_T, counts, 1, MPI_INT64_T, root, c->mpi);
    if (err == MPI_SUCCESS && c->rank == root) {
        for (int r = 0; r < c->size; r++) total += counts[r];
        sizes = malloc((size_t)c->size * sizeof *sizes);
        at = malloc((size_t)c->size * sizeof *at);
        *out = malloc((size_t)total + 1);
        if (total > INT32_MAX)
            rc = mg_error(MG_EINVAL, "gather: %lld bytes in all, more than 2 GiB", (long long)total);
        else if (!sizes || !at || !*out)
            rc = mg_error(MG_ENOMEM, "gather: out of memory for %lld bytes", (long long)total);
        for (int r = 0, o = 0; rc == MG_OK && r < c->size; o += sizes[r++]) {
            sizes[r] = (int)counts[r];
            at[r] = o;
        }
        ok = rc == MG_OK;
    }
    /* the root says whether it can take the parts, so nobody waits for nothing */
    if (err == MPI_SUCCESS) err = MPI_Bcast(&ok, 1, MPI_INT64_T, root, c->mpi);
    if (err == MPI_SUCCESS && ok)
        err = MPI_Gatherv(buf, (int)n, MPI_BYTE, *out, sizes, at, MPI_BYTE, root, c->mpi);
    finished(f, err);
    free(sizes);
    free(at);
    if (rc == MG_OK && err != MPI_SUCCESS) rc = failed(c, "gather", err);
    if (rc == MG_OK && !ok) rc = mg_error(MG_ENOMEM, "gather: the root has no room for the parts");
    if (rc != MG_OK) {
        free(*out);
        *out = NULL;
    }
    return rc;
}

_Noreturn void mg_comm_abort(mg_comm *c, int code) {
    fflush(NULL);
    MPI_Abort(c ? c->mpi : MPI_COMM_WORLD, code);
    _exit(code ? code : 1); /* MPI_Abort does not return; should it, end anyway */
}
