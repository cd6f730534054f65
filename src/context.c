/* context.c: the process's one context (see context.h), and the arenas it
 * makes on first use. Exports: mg_ctx, mg_context_reset, mg_step_arena,
 * mg_context_on_reset, mg_context_layer_new, mg_context_layer_drop,
 * mg_is_step_arena, mg_scratch_arena, mg_recompute_arena, mg_micro_arena_new,
 * mg_context_drop_arenas. */
#include "context.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

/* The public API takes no context, so the process holds one. The library's
 * other process-wide variables, each where it is for a reason that keeps it
 * out of the context (whose members mg_finalize frees, and which signal
 * handlers and other threads must not walk):
 * - the error of the calling thread (status.c: per thread, read after any call);
 * - the host arenas not yet freed (arena.c: below the context, which is made
 *   of arenas; they outlive a reset, mg_arenas_hold);
 * - "finalized" (dist/world.c: set by mg_finalize, read by the calls after it);
 * - each thread's kept buffers for the GEMM kernels' packing, and their keys
 *   (backend/cpu_common.c: per thread, freed by the key's destructor as the
 *   thread ends);
 * - the CPU's instruction set (backend/blas_core.c: the CPU and MG_CPU_ISA do
 *   not change), and the path a test forced on the deterministic GEMM
 *   (backend/cpu_gemm_det.c: a setting of the process, as MG_CPU_ISA is); the
 *   kernels read both, from any thread;
 * - the backend objects cpu.c, meta.c and cuda.cu hand out (constant but for the
 *   kernels --trace swaps), the GPU backend's state and cuBLAS's entry points
 *   (one GPU and one library per process: backend/cuda.cu, cuda_blas.cu);
 * - the warnings said once a process, though a program may start the library
 *   again (backend/blas_core.c's of OpenBLAS's kernels, cli/train_report.c's
 *   of a log that cannot be written);
 * - the files a stop signal removes and whether their reaper runs (io/files.c:
 *   its signal handler and reaper read them; one reaper a process), and the
 *   stop flag of `meshgrad train`'s handler (cli/train.c). */
static mg_context context;

mg_context *mg_ctx(void) { return &context; }

void mg_context_on_reset(void (*fn)(void)) {
    for (int i = 0; i < context.n_reset_hooks; i++)
        if (context.reset_hooks[i] == fn) return;
    if (context.n_reset_hooks < MG_RESET_HOOKS) context.reset_hooks[context.n_reset_hooks++] = fn;
}

/* The members a reset keeps (context.h says why each outlives it). */
#define KEPT(m) {offsetof(mg_context, m), sizeof(((mg_context *)0)->m)}
static const struct {
    size_t offset, size;
} kept[] = {
    KEPT(tensors), KEPT(n_tensors), KEPT(cap_tensors), KEPT(freed_tensors), KEPT(next_freed),
    KEPT(reset_hooks), KEPT(n_reset_hooks), KEPT(layers),
};

void mg_context_reset(void) {
    for (int i = context.n_reset_hooks - 1; i >= 0; i--) context.reset_hooks[i]();
    for (int d = 0; d < MG_DEVICE_KINDS; d++) {
        mg_arena_free(context.step[d]);
        mg_arena_free(context.scratch[d]);
        mg_arena_free(context.recompute_arena[d]);
    }
    mg_context old = context;
    memset(&context, 0, sizeof context);
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        size_t at = kept[i].offset;
        memcpy((char *)&context + at, (const char *)&old + at, kept[i].size);
    }
}

void *mg_context_layer_new(void **slot, size_t bytes, void (*free_fn)(void)) {
    if (!(*slot = calloc(1, bytes))) {
        fprintf(stderr, "meshgrad: out of memory for %zu bytes of the library's state\n", bytes);
        abort();
    }
    if (free_fn) mg_context_on_reset(free_fn);
    return *slot;
}

void mg_context_layer_drop(void **slot) {
    free(*slot);
    *slot = NULL;
}

/* The arena *slot of the current device, made on first use with `initial`
 * bytes: host memory from the heap, device memory from the allocator its
 * backend registered. */
static mg_arena *device_arena(mg_arena **slot, size_t initial) {
    int d = context.device;
    mg_arena **a = &slot[d];
    if (*a) return *a;
    if (d == MG_DEVICE_CPU) {
        *a = mg_arena_new(initial);
    } else if (d == MG_DEVICE_META && context.memory[d].alloc) {
        *a = mg_arena_new_on(initial, &context.memory[d]);
    } else if (d > 0 && d < MG_DEVICE_KINDS && context.memory[d].alloc) {
        *a = mg_arena_new_device(initial, &context.memory[d]);
    } else {
        mg_error(MG_EDEVICE, "arena: no memory for device %d (its backend has not started: "
                             "call mg_set_device first)", d);
    }
    return *a;
}

void mg_context_drop_arenas(int device) {
    if (device < 0 || device >= MG_DEVICE_KINDS) return;
    mg_arena_free(context.step[device]);
    mg_arena_free(context.scratch[device]);
    mg_arena_free(context.recompute_arena[device]);
    context.step[device] = context.scratch[device] = context.recompute_arena[device] = NULL;
}

mg_arena *mg_micro_arena_new(size_t initial) {
    mg_arena *step = mg_step_arena();
    if (!step) return NULL;
    int dev = mg_arena_device(step);
    if (dev == MG_DEVICE_CPU) return mg_arena_new(initial);
    if (dev == MG_DEVICE_META) return mg_arena_new_on(initial, &context.memory[dev]);
    return mg_arena_new_device(initial, &context.memory[dev]);
}

/* The step arena starts at 1 MiB; the scratch arena holds one big tensor or
 * so at a time and grows to what that needs. */
mg_arena *mg_step_arena(void) { return device_arena(context.step, (size_t)1 << 20); }
int mg_is_step_arena(const mg_arena *a) {
    for (int d = 0; d < MG_DEVICE_KINDS; d++)
        if (a && context.step[d] == a) return 1;
    return 0;
}
mg_arena *mg_scratch_arena(void) { return device_arena(context.scratch, (size_t)64 << 10); }
mg_arena *mg_recompute_arena(void) { return device_arena(context.recompute_arena, (size_t)1 << 20); }
