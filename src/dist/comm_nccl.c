/* comm_nccl.c: the NCCL implementation of the comm iface (see comm_nccl.h).
 *
 * One ncclComm_t per mg_comm, made collectively over the mg_comm's MPI
 * communicator: rank 0 makes the unique id and broadcasts it (with its status,
 * so a failure there fails every rank), every rank joins, and the outcome is
 * agreed with an all-reduce. Collectives on device buffers are enqueued on the
 * backend's compute stream (so they follow the kernels that made their input)
 * and then waited for, polling ncclCommGetAsyncError while waiting: a failed
 * communicator is aborted (ncclCommAbort) and every later call on it returns
 * MG_ECOMM. Semantics and counts are those of comm_mpi.c (rank-ordered blocks,
 * one-rank communicators make no NCCL call, counts are in floats).
 *
 * Host buffers still work: small control values (a bad-label count, a gradient
 * norm) go to MPI on the same communicator (an MPI comm kept inside), found with
 * cudaPointerGetAttributes. Mixing host and device buffers in one call is an
 * error.
 * Point-to-point sends and receives (comm.h's end) are ncclSend/ncclRecv on
 * the same stream, each followed by an event that its request polls; inside
 * a group the events are recorded after ncclGroupEnd.
 * Exports: mg_comm_nccl_new, mg_nccl_version. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "backend/device.h"
#include "dist/comm.h"
#include "dist/comm_nccl.h"
#include "status.h"

#define NCCL_GROUP_MAX 64 /* point-to-point transfers in one group */

typedef struct {
    ncclComm_t nccl;
    mg_comm *host; /* the MPI iface on the same communicator, for host buffers */
    cudaStream_t stream;
    int aborted;
    int in_group;  /* between p2p_group(c, 1) and (c, 0) */
    int ngroup;    /* device transfers posted in the group: their events come at its end */
    mg_p2p_request *group[NCCL_GROUP_MAX];
} nccl_ctx;

int mg_nccl_version(void) {
    int version = 0;
    if (ncclGetVersion(&version) != ncclSuccess) return 0;
    return version;
}

static void abort_comm(mg_comm *c) {
    nccl_ctx *x = c->context;
    if (x->nccl && !x->aborted) ncclCommAbort(x->nccl);
    x->aborted = 1;
}

/* The message names the call, the NCCL error and NCCL's own detail; then the
 * communicator is aborted (it cannot be trusted after an error). */
static int nccl_failed(mg_comm *c, const char *what, ncclResult_t r) {
    nccl_ctx *x = c->context;
    const char *detail = x->nccl && !x->aborted ? ncclGetLastError(x->nccl) : NULL;
    int code = mg_error(MG_ECOMM, "%s over %d ranks failed: NCCL: %s%s%s", what, c->size,
                        ncclGetErrorString(r), detail && *detail ? ": " : "",
                        detail ? detail : "");
    abort_comm(c);
    return code;
}

/* Waits for the work queued on the stream (event NULL) or for `event` on it,
 * watching for NCCL's asynchronous errors meanwhile. With `poll` it looks
 * once: 1 when the work is not done yet. */
static int wait_for_work(mg_comm *c, const char *what, cudaEvent_t event, int poll) {
    nccl_ctx *x = c->context;
    for (;;) {
        cudaError_t q = event ? cudaEventQuery(event) : cudaStreamQuery(x->stream);
        if (q == cudaSuccess) return MG_OK;
        if (q != cudaErrorNotReady) {
            cudaGetLastError();
            int code = mg_error(MG_ECOMM, "%s over %d ranks failed: CUDA: %s", what, c->size,
                                cudaGetErrorString(q));
            abort_comm(c);
            return code;
        }
        ncclResult_t async = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(x->nccl, &async);
        if (r != ncclSuccess) return nccl_failed(c, what, r);
        if (async != ncclSuccess && async != ncclInProgress) return nccl_failed(c, what, async);
        if (poll) return 1;
        sched_yield();
    }
}

static int wait_for(mg_comm *c, const char *what) { return wait_for_work(c, what, NULL, 0); }

/* Enqueued, then waited for. */
static int launched(mg_comm *c, const char *what, ncclResult_t r) {
    if (r != ncclSuccess) return nccl_failed(c, what, r);
    return wait_for(c, what);
}

/* 1 when the buffers are device memory, 0 when host memory, <0 (error) when
 * mixed or the communicator was aborted. b may be NULL. */
static int on_device(mg_comm *c, const char *what, const void *a, const void *b) {
    int da = mg_cuda_is_device_pointer(a), db = b ? mg_cuda_is_device_pointer(b) : da;
    if (da != db)
        return mg_error(MG_EINVAL, "%s: one buffer is host memory and the other device memory; "
                                   "give two of one kind", what);
    if (da && ((nccl_ctx *)c->context)->aborted)
        return mg_error(MG_ECOMM, "%s: the NCCL communicator was aborted after an earlier "
                                  "failure; make a new mesh", what);
    return da;
}

/* dst = src on the stream (a one-rank communicator: no NCCL call) */
static int local_copy(mg_comm *c, const char *what, float *dst, const float *src, int64_t n) {
    if (dst == src || n == 0) return MG_OK;
    cudaError_t e = cudaMemcpyAsync(dst, src, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice,
                                    ((nccl_ctx *)c->context)->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return mg_error(MG_ECOMM, "%s: cudaMemcpyAsync failed: %s", what, cudaGetErrorString(e));
    }
    return MG_OK;
}

static int nccl_all_reduce(mg_comm *c, float *buf, int64_t n, mg_reduce_op op) {
    nccl_ctx *x = c->context;
    if (n == 0) return MG_OK;
    int dev = on_device(c, "all_reduce", buf, NULL);
    if (dev < 0) return dev;
    if (!dev) return x->host->iface->all_reduce(x->host, buf, n, op);
    if (c->size == 1) return MG_OK; /* sum, avg and max of one addend */
    ncclRedOp_t r = op == MG_REDUCE_MAX ? ncclMax : op == MG_REDUCE_AVG ? ncclAvg : ncclSum;
    return launched(c, "all_reduce",
                    ncclAllReduce(buf, buf, (size_t)n, ncclFloat, r, x->nccl, x->stream));
}

static int nccl_all_gather(mg_comm *c, const float *send, int64_t n, float *recv) {
    nccl_ctx *x = c->context;
    if (n == 0) return MG_OK;
    int dev = on_device(c, "all_gather", send, recv);
    if (dev < 0) return dev;
    if (!dev) return x->host->iface->all_gather(x->host, send, n, recv);
    if (c->size == 1) return local_copy(c, "all_gather", recv, send, n);
    /* in place when send == recv + rank * n, as NCCL defines it */
    return launched(c, "all_gather",
                    ncclAllGather(send, recv, (size_t)n, ncclFloat, x->nccl, x->stream));
}

static int nccl_reduce_scatter(mg_comm *c, const float *send, float *recv, int64_t n) {
    nccl_ctx *x = c->context;
    if (n == 0) return MG_OK;
    int dev = on_device(c, "reduce_scatter", send, recv);
    if (dev < 0) return dev;
    if (!dev) return x->host->iface->reduce_scatter(x->host, send, recv, n);
    if (c->size == 1) return local_copy(c, "reduce_scatter", recv, send, n);
    return launched(c, "reduce_scatter", ncclReduceScatter(send, recv, (size_t)n, ncclFloat,
                                                           ncclSum, x->nccl, x->stream));
}

static int nccl_all_to_all(mg_comm *c, const float *send, int64_t n, float *recv) {
    nccl_ctx *x = c->context;
    if (n == 0) return MG_OK;
    int dev = on_device(c, "all_to_all", send, recv);
    if (dev < 0) return dev;
    if (!dev) return x->host->iface->all_to_all(x->host, send, n, recv);
    if (c->size == 1) return local_copy(c, "all_to_all", recv, send, n);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
    return launched(c, "all_to_all",
                    ncclAlltoAll(send, recv, (size_t)n, ncclFloat, x->nccl, x->stream));
#else
    /* block r goes to rank r, block r of recv comes from rank r */
    ncclResult_t r = ncclGroupStart();
    for (int p = 0; p < c->size && r == ncclSuccess; p++) {
        r = ncclSend(send + (int64_t)p * n, (size_t)n, ncclFloat, p, x->nccl, x->stream);
        if (r == ncclSuccess)
            r = ncclRecv(recv + (int64_t)p * n, (size_t)n, ncclFloat, p, x->nccl, x->stream);
    }
    ncclResult_t end = ncclGroupEnd();
    return launched(c, "all_to_all", r != ncclSuccess ? r : end);
#endif
}

static int nccl_broadcast(mg_comm *c, float *buf, int64_t n, int root) {
    nccl_ctx *x = c->context;
    if (n == 0) return MG_OK;
    int dev = on_device(c, "broadcast", buf, NULL);
    if (dev < 0) return dev;
    if (!dev) return x->host->iface->broadcast(x->host, buf, n, root);
    if (c->size == 1) return MG_OK;
    return launched(c, "broadcast",
                    ncclBroadcast(buf, buf, (size_t)n, ncclFloat, root, x->nccl, x->stream));
}

/* The device work queued before it is done on every rank: the stream, then MPI. */
static int nccl_barrier(mg_comm *c) {
    nccl_ctx *x = c->context;
    cudaError_t e = cudaStreamSynchronize(x->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return mg_error(MG_ECOMM, "barrier: the compute stream failed: %s", cudaGetErrorString(e));
    }
    return x->host->iface->barrier(x->host);
}

/* ---- point-to-point: ncclSend / ncclRecv on the compute stream; a request is
 * an event recorded after the transfer (after ncclGroupEnd inside a group) ---- */

static int record_event(mg_comm *c, const char *what, mg_p2p_request *req) {
    nccl_ctx *x = c->context;
    cudaEvent_t e;
    cudaError_t err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    if (err == cudaSuccess) err = cudaEventRecord(e, x->stream);
    if (err != cudaSuccess) {
        cudaGetLastError();
        return mg_error(MG_ECOMM, "%s: recording its CUDA event failed: %s", what,
                        cudaGetErrorString(err));
    }
    req->event = e;
    return MG_OK;
}

static int nccl_p2p(mg_comm *c, float *buf, int64_t n, int peer, mg_p2p_request *req) {
    nccl_ctx *x = c->context;
    const char *what = req->send ? "send" : "recv";
    int dev = on_device(c, what, buf, NULL);
    if (dev < 0) return dev;
    if (!dev) /* host memory: MPI on the same communicator */
        return req->send ? x->host->iface->isend(x->host, buf, n, peer, req)
                         : x->host->iface->irecv(x->host, buf, n, peer, req);
    if (x->in_group && x->ngroup == NCCL_GROUP_MAX)
        return mg_error(MG_EINVAL, "%s: more than %d transfers in one group", what, NCCL_GROUP_MAX);
    ncclResult_t r = req->send ? ncclSend(buf, (size_t)n, ncclFloat, peer, x->nccl, x->stream)
                               : ncclRecv(buf, (size_t)n, ncclFloat, peer, x->nccl, x->stream);
    if (r != ncclSuccess) return nccl_failed(c, what, r);
    if (x->in_group) {
        x->group[x->ngroup++] = req;
        return MG_OK;
    }
    return record_event(c, what, req);
}

static int nccl_isend(mg_comm *c, const float *buf, int64_t n, int peer, mg_p2p_request *req) {
    return nccl_p2p(c, (float *)buf, n, peer, req);
}

static int nccl_irecv(mg_comm *c, float *buf, int64_t n, int peer, mg_p2p_request *req) {
    return nccl_p2p(c, buf, n, peer, req);
}

static int nccl_p2p_group(mg_comm *c, int begin) {
    nccl_ctx *x = c->context;
    if (begin) {
        if (x->in_group) return mg_error(MG_ESTATE, "p2p group: a group is already open");
        ncclResult_t r = ncclGroupStart();
        if (r != ncclSuccess) return nccl_failed(c, "p2p group", r);
        x->in_group = 1;
        x->ngroup = 0;
        return MG_OK;
    }
    if (!x->in_group) return mg_error(MG_ESTATE, "p2p group: no group is open");
    x->in_group = 0;
    ncclResult_t r = ncclGroupEnd();
    if (r != ncclSuccess) return nccl_failed(c, "p2p group", r);
    for (int i = 0; i < x->ngroup; i++) {
        int rc = record_event(c, "p2p group", x->group[i]);
        if (rc != MG_OK) return rc;
    }
    x->ngroup = 0;
    return MG_OK;
}

/* Done when the event has passed; waits watching NCCL's asynchronous errors. */
static int nccl_p2p_finish(mg_comm *c, mg_p2p_request *req, int wait) {
    nccl_ctx *x = c->context;
    if (!req->event) /* host memory */
        return wait ? x->host->iface->p2p_wait(x->host, req) : x->host->iface->p2p_test(x->host, req);
    int rc = wait_for_work(c, req->send ? "send" : "recv", (cudaEvent_t)req->event, !wait);
    if (rc != MG_OK) return rc > 0 ? MG_OK : rc; /* 1: not done yet */
    cudaEventDestroy((cudaEvent_t)req->event);
    req->event = NULL;
    req->done = 1;
    return MG_OK;
}

static int nccl_p2p_test(mg_comm *c, mg_p2p_request *req) { return nccl_p2p_finish(c, req, 0); }
static int nccl_p2p_wait(mg_comm *c, mg_p2p_request *req) { return nccl_p2p_finish(c, req, 1); }

static void nccl_destroy(mg_comm *c) {
    nccl_ctx *x = c->context;
    if (!x) return;
    if (x->nccl && !x->aborted) {
        cudaStreamSynchronize(x->stream);
        ncclCommDestroy(x->nccl);
    }
    mg_comm_free(x->host);
    free(x);
    c->context = NULL;
}

static const struct mg_comm_iface nccl_iface = {
    .name = "nccl",
    .all_reduce = nccl_all_reduce,
    .all_gather = nccl_all_gather,
    .reduce_scatter = nccl_reduce_scatter,
    .all_to_all = nccl_all_to_all,
    .broadcast = nccl_broadcast,
    .barrier = nccl_barrier,
    .destroy = nccl_destroy,
    .isend = nccl_isend,
    .irecv = nccl_irecv,
    .p2p_test = nccl_p2p_test,
    .p2p_wait = nccl_p2p_wait,
    .p2p_group = nccl_p2p_group,
};

mg_comm *mg_comm_nccl_new(MPI_Comm mpi) {
    if (mpi == MPI_COMM_NULL) return mg_error_null(MG_EINVAL, "mg_comm_nccl_new: MPI_COMM_NULL");
    if (!mg_cuda_stream())
        return mg_error_null(MG_EDEVICE, "mg_comm_nccl_new: no CUDA backend: call "
                                         "mg_set_device(MG_DEVICE_CUDA) before making meshes");
    mg_comm *host = mg_comm_mpi_new(mpi); /* sets MPI_ERRORS_RETURN, rank and size */
    if (!host) return NULL;
    mg_comm *c = calloc(1, sizeof *c);
    nccl_ctx *x = calloc(1, sizeof *x);
    if (!c || !x) {
        free(c);
        free(x);
        mg_comm_free(host);
        return mg_error_null(MG_ENOMEM, "mg_comm_nccl_new: out of memory");
    }
    c->iface = &nccl_iface;
    c->context = x;
    c->mpi = mpi;
    c->rank = host->rank;
    c->size = host->size;
    x->host = host;
    x->stream = (cudaStream_t)mg_cuda_stream();

    /* rank 0's unique id, with its status, to every rank */
    struct {
        int status;
        ncclUniqueId id;
    } hello;
    memset(&hello, 0, sizeof hello);
    if (c->rank == 0) hello.status = (int)ncclGetUniqueId(&hello.id);
    int err = MPI_Bcast(&hello, (int)sizeof hello, MPI_BYTE, 0, mpi);
    if (err != MPI_SUCCESS) {
        mg_mpi_failed(err, "mg_comm_nccl_new: broadcasting the NCCL id over %d ranks failed",
                      c->size);
        mg_comm_free(c);
        return NULL;
    }
    if (hello.status != ncclSuccess) {
        mg_error(MG_ECOMM, "mg_comm_nccl_new: rank 0 could not make an NCCL id: %s",
                 ncclGetErrorString((ncclResult_t)hello.status));
        mg_comm_free(c);
        return NULL;
    }
    ncclResult_t r = ncclCommInitRank(&x->nccl, c->size, hello.id, c->rank);
    if (r != ncclSuccess) {
        x->nccl = NULL;
        mg_error(MG_ECOMM, "mg_comm_nccl_new: ncclCommInitRank (rank %d of %d) failed: %s", c->rank,
                 c->size, ncclGetErrorString(r));
    }
    int mine = r == ncclSuccess, all = mine;
    err = MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, mpi);
    if (err != MPI_SUCCESS || !all) {
        if (mine)
            mg_error(MG_ECOMM, "mg_comm_nccl_new: making the NCCL communicator of %d ranks failed "
                               "on another rank (see its error)", c->size);
        abort_comm(c);
        mg_comm_free(c);
        return NULL;
    }
    return c;
}
