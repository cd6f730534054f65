/* meshgrad.h: the public C API of meshgrad, a distributed training framework.
 *
 * Exports opaque handles (mg_mesh, mg_tensor, mg_dtensor), the placement value
 * (MG_SHARD(d), MG_REPLICATE, MG_PARTIAL_SUM), status codes, and the calls for
 * meshes, local tensors, distributed tensors, sharded ops and autograd, the
 * communication counters, and the flight recorder and trace that show what a
 * run does (docs/OBSERVE.md).
 *
 * Every shape passed to or returned by a call on distributed tensors is a GLOBAL
 * shape; local shapes exist only inside the library and in mg_local().
 * Fallible calls return a status (0 ok, negative MG_E*) or NULL, and
 * mg_last_error() says what was wrong and what to do. */
#ifndef MESHGRAD_H
#define MESHGRAD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MG_MAX_DIMS 8      /* tensor rank 0..8 */
#define MG_MAX_MESH_DIMS 4 /* mesh rank 1..4 */

/* ---- status --------------------------------------------------------------- */
enum {
    MG_OK = 0,
    MG_EINVAL = -1,     /* a bad argument (flag, size, index, option) */
    MG_ESHAPE = -2,     /* shapes that do not fit together */
    MG_EPLACEMENT = -3, /* placements that do not fit the mesh or tensor */
    MG_EMESH = -4,      /* a mesh that does not fit the world, or mixed meshes */
    MG_ENOMEM = -5,     /* out of memory */
    MG_EIO = -6,        /* a file that cannot be read or written */
    MG_EFORMAT = -7,    /* a file whose content is not what it should be */
    MG_ECOMM = -8,      /* a collective failed (MPI/NCCL) or timed out */
    MG_ESTATE = -9,     /* a call at the wrong time (freed graph, not initialized) */
    MG_EDEVICE = -10,   /* CUDA / device error, or no device */
};

/* MPI_Init if needed; idempotent. Collective over the world the first time (every
 * rank calls it): it asks MPI which ranks share this machine. */
int mg_init(int *argc, char ***argv);
void mg_finalize(void);
int mg_rank(void);
int mg_world_size(void);
const char *mg_last_error(void); /* this thread's last message ("" if none) */
const char *mg_version(void);

/* ---- devices -------------------------------------------------------------- */
enum { MG_DEVICE_CPU = 0, MG_DEVICE_CUDA = 1 };
/* Where distributed tensors (shards, parameters, gradients, op results) live
 * from now on: MG_DEVICE_CPU (the default) or MG_DEVICE_CUDA (one GPU per rank:
 * its rank on the node modulo the node's GPUs; collectives through NCCL).
 * Collective over the world; call after mg_init and before mg_mesh_new (a mesh
 * uses the device set when it is made). MG_EDEVICE when built without CUDA or
 * when some rank has no GPU of its own (every rank then stays where it was).
 * Local tensors made by mg_tensor_new / mg_tensor_from_data, and those returned
 * by mg_full_tensor, are host memory whatever the device; mg_local() of a
 * tensor on a GPU holds device memory. */
int mg_set_device(int device);
int mg_get_device(void);
/* Waits for the work queued on the device (nothing to do on the CPU); MG_EDEVICE
 * with the message of the first device error met since the start. */
int mg_device_synchronize(void);

/* ---- compute dtype -------------------------------------------------------- */
typedef enum { MG_DTYPE_FP32 = 0, MG_DTYPE_BF16 = 1 } mg_dtype;
/* The math of the matrix products (mg_linear, mg_matmul and their gradients)
 * from the next op on, on every device: MG_DTYPE_FP32 (the default), or
 * MG_DTYPE_BF16, mixed precision as PyTorch's autocast does it: the products'
 * inputs rounded to bfloat16, their sums and results fp32. Tensors,
 * parameters, gradients, optimizer state, norms, softmax and the loss stay
 * fp32. A parameter is rounded once a step, when a product first takes it,
 * and that copy serves the step (the optimizer's update drops it): a
 * parameter changed in place in mid-step otherwise is seen from the next step
 * (or call this again, which drops every copy). MG_EINVAL for another value. */
int mg_set_compute_dtype(mg_dtype dtype);
mg_dtype mg_get_compute_dtype(void);

/* ---- deterministic mode --------------------------------------------------- */
/* On (1): from the next op on, every floating-point sum has one order fixed by
 * the global indices it adds (docs/DESIGN.md, "Determinism"), so a training
 * step gives the same bits on every mesh, plan, thread count and micro-batch
 * split that qualifies; the trainer refuses the others. CPU and fp32 only:
 * MG_EINVAL on a CUDA device or in bf16 (and those refuse the mode while it is
 * on). Off (0) by default. */
int mg_set_deterministic(int on);
int mg_get_deterministic(void);

/* ---- placements ----------------------------------------------------------- */
typedef enum { MG_PLACE_REPLICATE = 0, MG_PLACE_SHARD = 1, MG_PLACE_PARTIAL = 2 } mg_place_kind;
typedef struct {
    mg_place_kind kind;
    int dim; /* tensor dim for MG_PLACE_SHARD (negative counts from the end) */
} mg_placement;
#define MG_SHARD(d) ((mg_placement){MG_PLACE_SHARD, (d)})
#define MG_REPLICATE ((mg_placement){MG_PLACE_REPLICATE, 0})
#define MG_PARTIAL_SUM ((mg_placement){MG_PLACE_PARTIAL, 0})

/* ---- opaque types --------------------------------------------------------- */
typedef struct mg_mesh mg_mesh;
typedef struct mg_tensor mg_tensor;
typedef struct mg_dtensor mg_dtensor;

/* ---- mesh ----------------------------------------------------------------- */
mg_mesh *mg_mesh_new(int ndim, const int *shape); /* product(shape) == world size */
void mg_mesh_free(mg_mesh *);
int mg_mesh_ndim(const mg_mesh *);
const int *mg_mesh_shape(const mg_mesh *);
const int *mg_mesh_coord(const mg_mesh *); /* this rank's coordinates */

/* ---- local tensors (dense float32, row-major) ------------------------------ */
mg_tensor *mg_tensor_new(int ndim, const int64_t *shape); /* zeros */
mg_tensor *mg_tensor_from_data(int ndim, const int64_t *shape, const float *data); /* copies */
float *mg_tensor_data(mg_tensor *);
int mg_tensor_ndim(const mg_tensor *);
const int64_t *mg_tensor_shape(const mg_tensor *);
int64_t mg_tensor_numel(const mg_tensor *);
void mg_tensor_free(mg_tensor *); /* a tensor freed already: nothing happens */

/* ---- distributed tensors -------------------------------------------------- */
/* n must equal the mesh's number of dimensions: one placement per mesh dim.
 * Both are collective over the world: every rank must pass the same global
 * shape and placements (one small all-reduce checks it; ranks that differ are
 * named and every rank gets NULL). mg_from_local takes each rank's own block. */
mg_dtensor *mg_distribute(const mg_mesh *, const mg_tensor *full, const mg_placement *, int n);
mg_dtensor *mg_from_local(const mg_mesh *, const mg_tensor *local, const mg_placement *, int n,
                          int ndim, const int64_t *global_shape);
mg_dtensor *mg_redistribute(const mg_dtensor *, const mg_placement *, int n);
mg_tensor *mg_full_tensor(const mg_dtensor *); /* collective; every rank gets it all */
const mg_tensor *mg_local(const mg_dtensor *);
const mg_mesh *mg_dtensor_mesh(const mg_dtensor *);
int mg_dtensor_ndim(const mg_dtensor *);
const int64_t *mg_dtensor_shape(const mg_dtensor *); /* global */
const mg_placement *mg_dtensor_placements(const mg_dtensor *);
/* "(2, 40, 10) on mesh 1x2 [R, S(0)]; rank 1 (0,1) holds [0:1, 0:40, 0:10]" */
int mg_dtensor_describe(const mg_dtensor *, char *buf, size_t len);
/* Frees a tensor made by mg_distribute/mg_from_local (and its gradient). Tensors
 * made by ops live until mg_step_end() and are ignored here, as is a tensor
 * freed already. Refused with a message (nothing freed) while this step's graph,
 * an optimizer or a checkpoint still needs it, or for a gradient on its own.
 * The pointer stays refused by every call until 1024 more tensors are freed
 * (its memory is held back from malloc until then). */
void mg_dtensor_free(mg_dtensor *);

/* ---- autograd ------------------------------------------------------------- */
int mg_set_requires_grad(mg_dtensor *, int on);
/* Collective like the ops. Parameters' gradients come back at their own
 * placements; data-parallel sums are started in buckets while backward runs
 * and have all landed when it returns. One exception: a data-parallel
 * parameter whose optimizer takes the sum itself (its ranks share a node: the
 * optimizer step adds the ranks' parts as it updates, nn/optim_shard.h) keeps
 * only this rank's part until then. */
int mg_backward(mg_dtensor *scalar_loss);
/* The same walk from an output of any shape, seeded with `grad`, the gradient
 * of the loss with respect to `out` (out's global shape; brought to out's
 * placements, Replicate where out is Partial), as if out fed a loss whose backward reached it: a pipeline
 * stage's backward from the gradient the next stage sent (torch.autograd.
 * backward(out, grad)). grad NULL: out must be 0-d, as for mg_backward. */
int mg_backward_with(mg_dtensor *out, const mg_dtensor *grad);
/* The gradient; NULL until backward reached it. For a parameter whose sum was
 * left to its optimizer, the first call after a backward takes the sum (or
 * gathers the rows each rank holds of it) and is then collective: every rank
 * of that mesh dim calls it. */
mg_dtensor *mg_grad(const mg_dtensor *);
/* Zeroes a parameter's gradient. The buffer is kept and only marked zero: the
 * next backward writes the gradient over it (no fill, no add), and mg_grad
 * before that returns zeros. Without it, backward calls add up. */
int mg_zero_grad(mg_dtensor *);
int mg_grad_enabled(void);
int mg_set_grad_enabled(int on); /* returns the previous setting (no-grad mode) */
/* Gradient accumulation over micro-batches (PyTorch's no_sync): any number of
 * forward/backward pairs may run before mg_step_end, and their gradients add
 * up. With sync off, mg_backward leaves each data-parallel gradient as this
 * rank's addend (no communication); turn it on again before the last
 * micro-batch's backward, which adds its part and sums across ranks once.
 * mg_grad always returns the whole gradient (summing, collectively, what is
 * left). Fully sharded gradients are reduce-scattered at every backward, so
 * they stay sharded. Returns the previous setting (on at the start). */
int mg_set_grad_sync(int on);
int mg_grad_sync(void);
/* Ends a step: frees every tensor made by ops since the last call, and the graph.
 * A call given one of those tensors in the next 15 steps refuses it (MG_ESTATE);
 * later its memory may hold a tensor of that step, taken for it then: copy out
 * (mg_full_tensor) what you keep. */
void mg_step_end(void);

/* ---- ops (global shapes, sharding propagated) ----------------------------- */
mg_dtensor *mg_permute(const mg_dtensor *, const int *perm);
mg_dtensor *mg_transpose(const mg_dtensor *, int dim0, int dim1);
mg_dtensor *mg_linear(const mg_dtensor *x, const mg_dtensor *w, const mg_dtensor *b /*NULL ok*/);
mg_dtensor *mg_matmul(const mg_dtensor *a, const mg_dtensor *b); /* (..., M, K) @ (..., K, N) */
mg_dtensor *mg_sum(const mg_dtensor *); /* all elements -> 0-d */
mg_dtensor *mg_sum_dims(const mg_dtensor *, int n, const int *dims, int keepdim);
mg_dtensor *mg_mean(const mg_dtensor *);
mg_dtensor *mg_mean_dims(const mg_dtensor *, int n, const int *dims, int keepdim);
mg_dtensor *mg_expand(const mg_dtensor *, int ndim, const int64_t *global_shape);
mg_dtensor *mg_reshape(const mg_dtensor *, int ndim, const int64_t *global_shape);
mg_dtensor *mg_view(const mg_dtensor *, int ndim, const int64_t *global_shape);
mg_dtensor *mg_add(const mg_dtensor *a, const mg_dtensor *b); /* broadcasting */
mg_dtensor *mg_sub(const mg_dtensor *a, const mg_dtensor *b);
mg_dtensor *mg_mul(const mg_dtensor *a, const mg_dtensor *b);
mg_dtensor *mg_scale(const mg_dtensor *, float s);
mg_dtensor *mg_relu(const mg_dtensor *);
mg_dtensor *mg_gelu(const mg_dtensor *); /* tanh approximation */
mg_dtensor *mg_silu(const mg_dtensor *); /* x sigmoid(x), as torch's silu (Llama's SwiGLU) */
/* logits (..., V); labels (...) hold class indices as floats; the mean over every
 * label position (logits (B, C) and labels (B): the mean over the global batch).
 * Logits sharded on V are not gathered: each rank sums its classes' exponentials
 * and the ranks add them up (loss parallel). */
mg_dtensor *mg_cross_entropy(const mg_dtensor *logits, const mg_dtensor *labels);
mg_dtensor *mg_mse_loss(const mg_dtensor *pred, const mg_dtensor *target); /* mean */

/* ---- transformer ops (global shapes, any placement, gradients at the inputs'
 * placements; a shard of the dim an op reduces over is never gathered) ------- */
mg_dtensor *mg_softmax(const mg_dtensor *x, int dim); /* dim < 0 counts from the end */
mg_dtensor *mg_log_softmax(const mg_dtensor *x, int dim);
/* over the last dim: (x - mean) / sqrt(var + eps) * weight + bias; weight, bias (C) or NULL */
mg_dtensor *mg_layer_norm(const mg_dtensor *x, const mg_dtensor *weight, const mg_dtensor *bias,
                          float eps);
/* over the last dim, llama's RMSNorm: x / sqrt(mean(x^2) + eps) * weight; weight (C) or
 * NULL. Shards as mg_layer_norm: a row dim freely, C with the weight sharded alike. */
mg_dtensor *mg_rms_norm(const mg_dtensor *x, const mg_dtensor *weight, float eps);
/* x (B, T, H, D) -> (B, T, H, D), rotary position embedding as llama's (llama2.c,
 * Meta): the pair (2i, 2i + 1) of each head rotated by the angle pos * theta^(-2i / D),
 * pos = pos0 + t for the global index t along T (also when x is sharded on T). D even;
 * x may be sharded on B, T or H, not on D. */
mg_dtensor *mg_rope(const mg_dtensor *x, int64_t pos0, float theta);
/* rows of table (V, C) picked by ids (any shape, indices held as floats) -> (*ids.shape, C);
 * a table sharded on V gives each rank the ids in its rows (vocab parallel) */
mg_dtensor *mg_embedding(const mg_dtensor *ids, const mg_dtensor *table);
/* q, k, v (B, H, T, D) -> (B, H, T, D): softmax(q k^T / sqrt(D)) v; causal masks key j >
 * query i (global positions, also when q is sharded on T). Fused: no (T, T) matrix. */
mg_dtensor *mg_attention(const mg_dtensor *q, const mg_dtensor *k, const mg_dtensor *v, int causal);
/* grouped-query attention: q (B, H, T, D), k and v (B, KV, T, D) with KV dividing H ->
 * (B, H, T, D); query head h attends with k, v head h / (H / KV) (no copy of k, v), whose
 * gradients sum over the group. KV == H: mg_attention. Sharding the heads (tensor
 * parallel) shards q, k and v alike and needs KV divisible by the ranks that split them. */
mg_dtensor *mg_attention_gqa(const mg_dtensor *q, const mg_dtensor *k, const mg_dtensor *v,
                             int causal);
/* Causal attention of n queries at positions pos, pos + 1, ... against keys at
 * positions 0, 1, ...: q (B, H, n, D), k and v (B, KV, T, D) as mg_attention_gqa's;
 * query i sees key j when j <= pos + i, and the keys past the last query's position
 * are never read. A KV cache of T slots with its first pos + n filled is attended in
 * place (generation), with the bits of mg_attention_gqa on its filled part. */
mg_dtensor *mg_attention_at(const mg_dtensor *q, const mg_dtensor *k, const mg_dtensor *v,
                            int64_t pos);
/* [start, start + length) of dim */
mg_dtensor *mg_narrow(const mg_dtensor *x, int dim, int64_t start, int64_t length);
/* n tensors joined along dim (equal sizes elsewhere; placements may differ) */
mg_dtensor *mg_cat(int n, const mg_dtensor *const *xs, int dim);

/* ---- communication accounting --------------------------------------------- */
typedef enum {
    MG_COLL_ALL_REDUCE = 0,
    MG_COLL_ALL_GATHER,
    MG_COLL_REDUCE_SCATTER,
    MG_COLL_ALL_TO_ALL,
    MG_COLL_BROADCAST,
    MG_COLL_BARRIER,
    MG_COLL_SEND, /* point-to-point (pipeline parallelism): bytes sent */
    MG_COLL_RECV, /* point-to-point: 0 bytes (the sender counts them) */
    MG_COLL_COUNT
} mg_coll_kind;
typedef struct {
    int64_t calls;
    int64_t bytes; /* bytes this rank sent into the collective */
} mg_comm_stats;
/* Sums over every communicator of every mesh made so far, on this rank. */
void mg_comm_stats_get(mg_comm_stats out[MG_COLL_COUNT]);
void mg_comm_stats_reset(void);
const char *mg_coll_name(mg_coll_kind);

/* ---- seeing inside a run (docs/OBSERVE.md) ---------------------------------- */
/* The flight recorder: every rank keeps its last collectives and transfers
 * (MG_FLIGHT_ENTRIES of them, default 2048; 0 turns it off). Once a directory
 * is set, each rank writes them to DIR/rank-<r>.json, which `meshgrad trace
 * analyze DIR` reads: on kill -USR2 of the rank or of mpirun (the job goes
 * on), on a crash (SIGSEGV, SIGBUS, SIGFPE, SIGABRT; the crash then goes on),
 * when the collective watchdog finds a collective that waited more than
 * MG_COLLECTIVE_TIMEOUT seconds (default 300) and ends the job, and at
 * mg_flight_recorder_dump. DIR is made at the first dump (its parent must
 * exist); a file there that is not a dump is left as it is (a warning says
 * so). Refused (MG_EIO): a DIR that is not a directory, and a rank's
 * DIR/rank-<r>.json that is a link, a device, a FIFO, a socket or a
 * directory. NULL or "": no dumps (the default). Every rank calls it (not
 * collective); the first call installs the signal handlers. */
int mg_flight_recorder_set_dir(const char *dir);
/* Writes this rank's dump now; `reason` (1 to 63 characters) is written in
 * it ("loss is nan"). MG_ESTATE when no directory is set or the recorder is
 * off, MG_EIO when the dump could not be written (a line on stderr says why). */
int mg_flight_recorder_dump(const char *reason);

/* The trace: a timeline of steps first..last (numbered as the program passes
 * them to mg_trace_step_begin/end, both included) on every rank, as Chrome-
 * trace JSON (ui.perfetto.dev, chrome://tracing): the steps, the ops, the
 * backward nodes, the kernels, the collectives and transfers with arrows
 * from each send to its receive. Collective: every rank passes the same
 * arguments. Refused up front: a range with first < 0 or last < first, and a
 * path that is neither absent nor a trace meshgrad wrote (nothing else is
 * ever replaced). Rank 0 writes the file when step `last` ends and prints
 * "trace: PATH, steps A to B of N ranks ..." on stdout. One trace at a time. */
int mg_trace_open(const char *path, int64_t first, int64_t last);
/* Collective. A step begins: the flight recorder tags what follows with
 * `step`; at step `first` of an open trace every rank starts recording
 * (after a barrier, so their clocks line up), and while recording a "step"
 * span opens. Without a trace it only tags the flight recorder. */
int mg_trace_step_begin(int64_t step);
/* Collective. The step ends: its span closes; after step `last` the events
 * of every rank are gathered to rank 0, which writes the file. */
int mg_trace_step_end(int64_t step);
/* Collective. Writes what was recorded when the loop ended before step
 * `last`, and ends the trace (another may be opened). Call it before
 * mg_finalize, which drops a trace still open. */
int mg_trace_close(void);

#ifdef __cplusplus
}
#endif
#endif
