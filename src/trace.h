/* trace.h: the timeline recorder behind `--trace` (Chrome trace JSON, shown
 * by Perfetto and chrome://tracing). While it records, each rank keeps its
 * events in a buffer of the context (`trace`): spans of the training steps and
 * their phases (opened and closed by the program), ops (from the dispatch path
 * of ops/ops.c), backward nodes (autograd/backward.c), kernels (the backend's
 * vtable, decorated while tracing: backend/trace_kernels.c), collectives and
 * point-to-point transfers (the flight recorder's records as they complete).
 * Off, every hook costs one test of the context's `tracing` flag.
 *
 * Spans on a rank's main thread nest: a step holds its phases, a phase its
 * ops and backward nodes, those their kernels and blocking collectives. An op
 * span runs from the op's start (mg_trace_op_begin) to its record on the tape
 * (mg_trace_op_end) or, for ops that record nothing (the gradient ops of the
 * VJPs), to the end of the last kernel or collective it ran; a span opened or
 * closed around it ends it first, so it never straddles one. Non-blocking
 * collectives and transfers (in flight while the thread computes) go on
 * lanes of their own (tid 1, 2, ...: none overlaps another on its lane), and
 * a wait for one is a span ("wait") on the main thread. Every send is joined
 * to its receive by a flow arrow: both ends compute one id from (mesh dim,
 * sender, receiver, sequence number).
 *
 * Times: nanoseconds on this host's monotonic clock, shown relative to the
 * moment mg_trace_start ran (the program starts all ranks after a barrier, so
 * the ranks' timelines line up to the barrier's skew).
 *
 * Exports: mg_trace_cat, mg_trace_start, mg_trace_stop, mg_trace_begin,
 * mg_trace_end, mg_trace_op_begin, mg_trace_op_cost, mg_trace_op_end, mg_trace_kernel,
 * mg_trace_comm, mg_trace_now, mg_trace_format, mg_trace_free. */
#ifndef MG_TRACE_H
#define MG_TRACE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    MG_TRACE_STEP = 0, /* a training step: arg the step number */
    MG_TRACE_PHASE,    /* forward, backward, optimizer, data... */
    MG_TRACE_OP,       /* a public op (or a gradient op) */
    MG_TRACE_BACKWARD, /* one node of backward: arg the node's sequence number */
    MG_TRACE_KERNEL,   /* a local kernel */
    MG_TRACE_COMM,     /* a blocking collective */
    MG_TRACE_WAIT,     /* a wait for a non-blocking collective or transfer */
    MG_TRACE_ASYNC,    /* a non-blocking collective in flight (a lane) */
    MG_TRACE_SEND,     /* a transfer in flight (a lane) */
    MG_TRACE_RECV,
    MG_TRACE_CATS
} mg_trace_cat;

/* Starts recording (from an empty buffer); MG_ENOMEM. */
int mg_trace_start(void);
/* Stops recording; the events stay until mg_trace_format or mg_trace_free. */
void mg_trace_stop(void);
/* Nanoseconds on the monotonic clock while recording, else 0 (skip the work). */
int64_t mg_trace_now(void);

/* A span of the main thread around what follows (steps, phases, backward
 * nodes); `name` must outlive the trace (a string literal). */
void mg_trace_begin(mg_trace_cat cat, const char *name, int64_t arg);
void mg_trace_end(void);
/* An op starts (`who`: its name) / was recorded on the tape. */
void mg_trace_op_begin(const char *who);
void mg_trace_op_end(void);
/* The open op's kernel cost (its record's, op_def.h): the span's args "flops"
 * and "bytes" (this rank's shard). */
void mg_trace_op_cost(double flops, double bytes);
/* A kernel ran from t0 (mg_trace_now) to now; a, b, c: its sizes. */
void mg_trace_kernel(const char *name, int64_t t0, int64_t a, int64_t b, int64_t c);
/* A collective or transfer completed (flight.c): way 0 a collective, 1 a send,
 * 2 a receive; peer a world rank (transfers); post/start/end: when it was
 * posted, started blocking (0: never waited for) and ended. */
void mg_trace_comm(const char *op, int way, int dim, int peer, int64_t seq, int64_t bytes,
                   int64_t post, int64_t start, int64_t end);

/* This rank's events as Chrome-trace JSON objects separated by ",\n" (no
 * brackets), process id `rank`: a malloc'd string in *out (its length in
 * *len), for the program to gather and write. Spans still open are closed
 * now. MG_ENOMEM. */
int mg_trace_format(int rank, char **out, size_t *len);
/* Frees the buffer (and stops recording). */
void mg_trace_free(void);

#endif
