/* trace_kernels.h: kernels on the --trace timeline. While a trace records,
 * the backend of the current device gets a decorated copy of its iface in
 * place of its own: each wrapped kernel (gemm, gemm_batched, permute,
 * copy_block, add_block, copy, fill, unary, binary, axpy, the reductions, the
 * losses and the optimizer steps) calls the real one and records a span (trace.h); every
 * other entry (memory, and kernels added later) is the backend's own. Off,
 * nothing is decorated: the kernels cost what they always did.
 * On a GPU a span is the time to launch the kernel, not to run it.
 * Exports: mg_backend_trace_kernels. */
#ifndef MG_BACKEND_TRACE_KERNELS_H
#define MG_BACKEND_TRACE_KERNELS_H

#include <stdbool.h>

/* Decorates (on) or restores (off) the current device's backend. MG_ENOMEM. */
int mg_backend_trace_kernels(bool on);

#endif
