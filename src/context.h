/* context.h: the library's state, in one place (ggml's context, llm.c's model
 * struct). What the library must remember between calls lives here, not in
 * file-scope variables (context.c lists the few that remain, and why):
 * - this layer's members, below: each device's memory and arenas, the tensor
 *   registry, the reset hooks, the timeline of --trace (trace.h), and the few
 *   members an upper layer sets that a layer below it reads (the device, the
 *   step count);
 * - one opaque pointer per upper layer (`layers`), to the struct that layer
 *   defines in its own <layer>_state.h (read by it and the layers above it,
 *   as its other headers are): backend/ (the CPU threads, the bf16 and
 *   deterministic switches, kept buffers, the weights' bf16 copies), dist/
 *   (the world and comms, the reducer, the watchdog, the flight recorder, the
 *   live tensors), ops/ (the grad mode, the parameter copies), autograd/ (the
 *   graph being walked), io/ (mg_trace_open's trace, the flight directory),
 *   nn/ (the pipeline's meta headers), train/ (the token loaders open now).
 *   The layer's accessor (mg_dist() and the like) makes it on first use with
 *   mg_context_layer_new, which registers the layer's free with
 *   mg_context_on_reset. This header includes nothing above src/.
 *
 * The public API (meshgrad.h) takes no context argument, so a process has one:
 * mg_ctx() returns it. mg_finalize (dist/world.c) frees what the files above
 * world.c registered with it (dist/world.h), then the comms' state, then
 * mg_context_reset runs each layer's free (the newest registered first): a
 * layer frees its own members, its struct, and NULLs its pointer, or keeps
 * the members that outlive a reset (dist's live tensors, train's open
 * loaders: a program may free them after mg_finalize). Then it frees this
 * layer's arenas and zeroes the rest, so mg_init may start again. context.c
 * frees no other layer's member.
 *
 * Exports: mg_context, mg_ctx, mg_context_reset, mg_context_on_reset, mg_context_layer_new,
 * mg_step_arena, mg_is_step_arena, mg_scratch_arena, mg_recompute_arena, mg_micro_arena_new,
 * mg_context_drop_arenas. */
#ifndef MG_CONTEXT_H
#define MG_CONTEXT_H

#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "meshgrad.h"

/* Beside meshgrad.h's MG_DEVICE_CPU and MG_DEVICE_CUDA, internal to the
 * library: tensors with no data anyone reads, on which no kernel runs
 * (backend/meta.c, the step estimate's). */
#define MG_DEVICE_META 2
#define MG_DEVICE_KINDS 3
#define MG_RESET_HOOKS 16 /* mg_context_on_reset: the library registers 7 */

struct mg_trace;

/* A buffer kept between calls, grown as needed (redistribute's staging,
 * dist/redistribute.c; the CPU backend's bf16 and deterministic buffers). */
typedef struct {
    void *p;
    size_t bytes;
} mg_staging;

struct mg_context {
    /* ---- src/: memory ---- */
    /* each device's memory; the CPU's is built in, a GPU backend registers its
     * own when it starts (backend/cuda.cu) */
    mg_device_memory memory[MG_DEVICE_KINDS];
    /* per device: the step arena (a step's tensors and its tape) and the
     * scratch arena (parameters gathered for use, ops/ops.c, and a leaf's
     * gradient on its way to the reducer, autograd/backward.c) */
    mg_arena *step[MG_DEVICE_KINDS], *scratch[MG_DEVICE_KINDS];
    /* tensor.c: every heap tensor not yet freed (a set of pointers, open
     * addressing: never read through), so that mg_tensor_free of one freed
     * already does nothing; and the headers freed last, held back from malloc
     * a while (a pointer kept to one is not taken for a new tensor that
     * malloc put at its address). Kept by mg_context_reset (a program may
     * free its tensors after mg_finalize). */
    struct mg_tensor **tensors;
    size_t n_tensors, cap_tensors;
    struct mg_tensor **freed_tensors;
    int next_freed;
    /* per device: the recompute arena, the tensor data of one recomputed
     * segment at a time (autograd/recompute.h) */
    mg_arena *recompute_arena[MG_DEVICE_KINDS];

    /* context.c: each layer's free (mg_context_on_reset); kept by
     * mg_context_reset: registered once, a free runs at every reset */
    void (*reset_hooks[MG_RESET_HOOKS])(void);
    int n_reset_hooks;

    /* ---- src/: the timeline of --trace (trace.c) ---- */
    int tracing;            /* recording now: the one test every trace hook makes */
    struct mg_trace *trace; /* the events, kept after recording stops until freed */

    /* ---- set by an upper layer, read here or by a layer below the setter ---- */
    int device; /* backend/device.c: where new tensors live (MG_DEVICE_*): this layer's
                 * arenas and tensors are made there */
    int node_ranks; /* dist/world.c: ranks on this machine (counted by mg_init); machine.c
                     * sizes a run's memory by it */
    /* autograd/backward.c: mg_step_end calls so far (dtensor.h's graph_step): the
     * weights' bf16 copies (backend/) and the tensor headers (dist/) are a step's */
    int64_t steps;
    /* ops/tape.c: the next node's sequence number (dist/dtensor.c: a tensor an
     * op of this step took is not freed) */
    int64_t tape_seq;

    /* Each upper layer's state, made on first use by its accessor (the
     * layer's <layer>_state.h) through mg_context_layer_new; opaque here.
     * Kept by mg_context_reset: NULL where the layer's free freed its state,
     * and the state where the layer keeps it (members that outlive a reset). */
    struct {
        struct mg_backend_state *backend;
        struct mg_dist_state *dist;
        struct mg_ops_state *ops;
        struct mg_autograd_state *autograd;
        struct mg_io_state *io;
        struct mg_nn_state *nn;
        struct mg_train_state *train;
    } layers;
};
typedef struct mg_context mg_context;

/* The process's context. */
mg_context *mg_ctx(void);
/* fn runs at every mg_context_reset from now on (the newest first), before
 * the context is zeroed: the free of what a layer holds then (nothing, when it
 * holds nothing), registered as the layer first makes its state (once: a
 * second call with fn does nothing). */
void mg_context_on_reset(void (*fn)(void));
/* A layer's state of `bytes`, zeroed, into *slot (the layer's member of
 * mg_ctx()->layers); `free_fn` (NULL: none) is registered with
 * mg_context_on_reset. Out of memory, it says so and aborts: the accessors
 * are read on hot paths that check nothing. */
void *mg_context_layer_new(void **slot, size_t bytes, void (*free_fn)(void));
/* Frees a layer's state and NULLs *slot: the end of a layer's free, after it
 * freed what its state points to. */
void mg_context_layer_drop(void **slot);
/* What a layer's accessor returns: *slot, made on first use (a NULL check and
 * a load, after mg_ctx()). */
static inline void *mg_context_layer(void **slot, size_t bytes, void (*free_fn)(void)) {
    return *slot ? *slot : mg_context_layer_new(slot, bytes, free_fn);
}
/* A layer's accessor, `type *fn(void)`: its state in mg_ctx()->layers.slot,
 * made on first use with free_fn (NULL: none) as its reset hook (each
 * layer's <layer>_state.h defines one). */
#define MG_CONTEXT_LAYER(fn, type, slot, free_fn)                                        \
    static inline type *fn(void) {                                                       \
        return mg_context_layer((void **)&mg_ctx()->layers.slot, sizeof(type), free_fn); \
    }
/* The arenas of the current device (mg_get_device()), made on first use;
 * NULL with a message when that device's backend has not registered its memory.
 * - step: everything made during one training step (activations,
 *   temporaries, graph nodes); mg_step_end resets it.
 * - scratch: parameters gathered for use (ops/ops.c) and a leaf's gradient
 *   on its way to its buffer (autograd/backward.c, dist/reducer.c). One arena
 *   for both, so that its memory is one big tensor's, not two: a node's
 *   gathered weights are given back before its weight gradients are made,
 *   and backward gives back every copy and resets it after each node
 *   (mg_ops_release_all). */
mg_arena *mg_step_arena(void);
/* Is `a` a device's step arena? (Makes none.) */
int mg_is_step_arena(const mg_arena *a);
mg_arena *mg_scratch_arena(void);
/* The recompute arena of the current device, made on first use (NULL with a
 * message): the tensor data of a recomputed segment (a block whose
 * activations are dropped after its forward), while its forward runs and
 * again while it is run again and walked in backward; reset after each
 * (autograd/recompute.h). */
mg_arena *mg_recompute_arena(void);
/* A new arena on the step arena's device, of `initial` bytes, the caller's to
 * free: a micro-batch's tensor data, redirected there (mg_arena_redirect_data)
 * and reset once its backward is done (the pipeline's slots, --grad-accum).
 * NULL with a message. */
mg_arena *mg_micro_arena_new(size_t initial);
/* Frees a device's step, scratch and recompute arenas (no tensor may be left
 * in them): the next use makes new ones, whose high-water marks start at 0
 * (one run of the step estimate after another, train/estimate.c). */
void mg_context_drop_arenas(int device);

/* Runs each layer's free (the newest registered first), frees this layer's
 * arenas and zeroes the context but for what outlives a reset: the tensor
 * registry, the hooks, and the layers' pointers (NULL where a layer freed its
 * state). */
void mg_context_reset(void);

/* dist/world.c: MG_OK, or MG_ESTATE with a message naming `who` when called
 * after mg_finalize (whose state is gone, MPI's perhaps too: a mesh or tensor
 * made before it cannot be used). The public calls that communicate check it. */
int mg_check_not_finalized(const char *who);

#endif
