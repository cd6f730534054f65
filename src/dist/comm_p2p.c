/* comm_p2p.c: point-to-point sends and receives on a communicator, for
 * pipeline parallelism (see the end of comm.h): the counting wrappers
 * (mg_comm_isend ... mg_comm_p2p_group_end: check, count, record in the
 * flight recorder, dispatch; a wait is watched by the collective watchdog,
 * naming the peer) and the MPI iface's
 * entries (MPI_Isend / MPI_Irecv with one tag, split into pieces above the
 * MPI count limit, in order).
 * Exports: mg_comm_isend, mg_comm_irecv, mg_comm_p2p_test, mg_comm_p2p_wait,
 * mg_comm_p2p_group_begin, mg_comm_p2p_group_end, mg_comm_mpi_isend,
 * mg_comm_mpi_irecv, mg_comm_mpi_p2p_test, mg_comm_mpi_p2p_wait. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/comm.h"
#include "dist/comm_info.h"
#include "dist/dist_state.h"
#include "dist/flight.h"
#include "dist/watchdog.h"
#include "status.h"

static int p2p_failed(const mg_comm *c, const mg_p2p_request *req, int err) {
    return mg_mpi_failed(err, "%s of %lld floats %s rank %d (of %d) failed",
                         req->send ? "send" : "recv", (long long)req->n,
                         req->send ? "to" : "from", req->peer, c->size);
}

/* ---- the wrappers --------------------------------------------------------------- */

static int post(mg_comm *c, float *buf, int64_t n, int peer, int send, mg_p2p_request *req) {
    memset(req, 0, sizeof *req);
    req->mpi = MPI_REQUEST_NULL;
    req->peer = peer;
    req->send = send;
    req->n = n;
    req->done = 1;
    req->flight = -1;
    const char *what = send ? "send" : "recv";
    if (n < 0) return mg_error(MG_EINVAL, "%s: count %lld is negative", what, (long long)n);
    if (peer < 0 || peer >= c->size)
        return mg_error(MG_EINVAL, "%s: peer %d is not a rank of a communicator of %d", what, peer,
                        c->size);
    if (!c->iface->isend || !c->iface->irecv)
        return mg_error(MG_ECOMM, "%s: the %s communicator has no point-to-point transfers", what,
                        c->iface->name);
    mg_coll_kind kind = send ? MG_COLL_SEND : MG_COLL_RECV;
    c->stats[kind].calls++;
    c->stats[kind].bytes += mg_coll_bytes(kind, c->size, c->rank, n, peer);
    if (c->meta) return MG_OK; /* counted; done at once */
    req->flight = mg_flight_post(c->mpi, what, 4 * n, MG_FLIGHT_FLOAT32, peer, send, false);
    req->done = 0;
    int rc = send ? c->iface->isend(c, buf, n, peer, req) : c->iface->irecv(c, buf, n, peer, req);
    if (rc != MG_OK) {
        req->done = 1;
        mg_flight_done(req->flight);
    }
    return rc;
}

int mg_comm_isend(mg_comm *c, const float *buf, int64_t n, int peer, mg_p2p_request *req) {
    return post(c, (float *)buf, n, peer, 1, req);
}

int mg_comm_irecv(mg_comm *c, float *buf, int64_t n, int peer, mg_p2p_request *req) {
    return post(c, buf, n, peer, 0, req);
}

int mg_comm_p2p_test(mg_comm *c, mg_p2p_request *req) {
    if (req->done) return MG_OK;
    int rc = c->iface->p2p_test(c, req);
    if (rc != MG_OK) req->done = 1;
    if (req->done) mg_flight_done(req->flight);
    return rc;
}

/* The watchdog names this rank and the peer (world ranks) and the mesh dim,
 * from the communicator's record. */
static void watch(mg_comm *c, const char *op, int peer, int ranks[2]) {
    const mg_comm_info *info = mg_comm_info_of(c->mpi);
    ranks[0] = info ? info->ranks[c->rank] : -1;
    ranks[1] = info ? info->ranks[peer] : -1;
    mg_watchdog_begin(op, info ? info->mesh_dim : MG_WATCHDOG_UNKNOWN_DIM, ranks,
                      peer == c->rank ? 1 : 2);
}

int mg_comm_p2p_wait(mg_comm *c, mg_p2p_request *req) {
    if (req->done) return MG_OK;
    int ranks[2];
    mg_flight_wait_begin(req->flight);
    watch(c, req->send ? "send" : "recv", req->peer, ranks);
    int rc = c->iface->p2p_wait(c, req);
    mg_watchdog_end();
    req->done = 1;
    mg_flight_done(req->flight);
    return rc;
}

int mg_comm_p2p_group_begin(mg_comm *c) {
    return c->iface->p2p_group ? c->iface->p2p_group(c, 1) : MG_OK;
}

int mg_comm_p2p_group_end(mg_comm *c) {
    return c->iface->p2p_group ? c->iface->p2p_group(c, 0) : MG_OK;
}

/* ---- the MPI iface ---------------------------------------------------------------- */

static int mpi_post(mg_comm *c, float *buf, int64_t n, int peer, mg_p2p_request *req) {
    int64_t max = mg_comm_mpi_max_count();
    int pieces = n <= max ? 1 : (int)((n + max - 1) / max);
    MPI_Request *r = &req->mpi;
    if (pieces > 1) {
        r = req->pieces = malloc((size_t)pieces * sizeof *r);
        if (!r)
            return mg_error(MG_ENOMEM, "%s: out of memory for %d requests",
                            req->send ? "send" : "recv", pieces);
        req->npieces = pieces;
    }
    for (int i = 0; i < pieces; i++) { /* in order: the peer splits the same way */
        int64_t o = (int64_t)i * max;
        int m = (int)(n - o < max ? n - o : max);
        int err = req->send ? MPI_Isend(buf + o, m, MPI_FLOAT, peer, MG_P2P_TAG, c->mpi, &r[i])
                            : MPI_Irecv(buf + o, m, MPI_FLOAT, peer, MG_P2P_TAG, c->mpi, &r[i]);
        if (err != MPI_SUCCESS) {
            free(req->pieces);
            req->pieces = NULL;
            return p2p_failed(c, req, err);
        }
    }
    return MG_OK;
}

int mg_comm_mpi_isend(mg_comm *c, const float *buf, int64_t n, int peer, mg_p2p_request *req) {
    return mpi_post(c, (float *)buf, n, peer, req);
}

int mg_comm_mpi_irecv(mg_comm *c, float *buf, int64_t n, int peer, mg_p2p_request *req) {
    return mpi_post(c, buf, n, peer, req);
}

/* MPI_Waitall and MPI_Testall report a failed piece as MPI_ERR_IN_STATUS: take
 * the piece's own error. */
static int pieces_error(int err, const MPI_Status *st, int n) {
    if (err != MPI_ERR_IN_STATUS) return err;
    for (int i = 0; i < n; i++)
        if (st[i].MPI_ERROR != MPI_SUCCESS && st[i].MPI_ERROR != MPI_ERR_PENDING)
            return st[i].MPI_ERROR;
    return err;
}

/* A receive that got fewer floats than it asked for: the send and the receive
 * of a transfer must have one size (a longer send is MPI's MPI_ERR_TRUNCATE;
 * Open MPI 4.1 does not report that for a rank sending to itself). */
static int short_receive(const mg_comm *c, const mg_p2p_request *req, const MPI_Status *st) {
    int64_t got = 0;
    for (int i = 0; i < (req->npieces > 1 ? req->npieces : 1); i++) {
        int k = 0;
        MPI_Get_count(&st[i], MPI_FLOAT, &k);
        got += k;
    }
    if (got == req->n) return MG_OK;
    return mg_error(MG_ECOMM, "recv of %lld floats from rank %d (of %d) got %lld: a send and its "
                              "receive must have one size",
                    (long long)req->n, req->peer, c->size, (long long)got);
}

static int mpi_finish(mg_comm *c, mg_p2p_request *req, int wait) {
    int flag = 0, err, n = req->npieces > 1 ? req->npieces : 1;
    MPI_Status one, *st = n > 1 ? calloc((size_t)n, sizeof *st) : &one;
    if (!st) return mg_error(MG_ENOMEM, "p2p: out of memory for %d statuses", n);
    bool nap = wait && mg_dist()->oversubscribed; /* see world.c */
    if (nap) wait = 0;
    for (;;) {
        if (n > 1) {
            err = wait ? MPI_Waitall(n, req->pieces, st) : MPI_Testall(n, req->pieces, &flag, st);
            err = pieces_error(err, st, n);
        } else {
            err = wait ? MPI_Wait(&req->mpi, st) : MPI_Test(&req->mpi, &flag, st);
        }
        if (!nap || flag || err != MPI_SUCCESS) break;
        struct timespec pause = {0, 50000}; /* 50 us */
        nanosleep(&pause, NULL);
    }
    int rc = err == MPI_SUCCESS ? MG_OK : p2p_failed(c, req, err);
    if (wait || flag || rc != MG_OK) {
        req->done = 1;
        if (rc == MG_OK && !req->send) rc = short_receive(c, req, st);
        free(req->pieces);
        req->pieces = NULL;
    }
    if (st != &one) free(st);
    return rc;
}

int mg_comm_mpi_p2p_test(mg_comm *c, mg_p2p_request *req) { return mpi_finish(c, req, 0); }
int mg_comm_mpi_p2p_wait(mg_comm *c, mg_p2p_request *req) { return mpi_finish(c, req, 1); }
