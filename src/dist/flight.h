/* flight.h: the flight recorder (after PyTorch's Flight Recorder). Every rank
 * keeps its last N collectives and point-to-point transfers in a ring (the
 * context's `flight`): the communicator (comm_info.h), the sequence number on
 * it (collectives count per communicator from 1; a transfer counts per peer
 * and direction: the k-th send from a to b meets the k-th receive on b from
 * a), the op, the mesh dim, the bytes of this rank's buffer, the element type,
 * the training step, the times it was posted, started and ended, and its
 * state: queued (a non-blocking post not waited for yet), started (a call
 * blocking in it, or a wait), done.
 *
 * The comm layer records every call (comm.c, comm_control.c, comm_p2p.c): a
 * clock read and a few stores in the ring, no allocation. N comes from
 * MG_FLIGHT_ENTRIES (default 2048; 0 turns the recorder off), read once.
 *
 * The ring is written to DIR/rank-<r>.json (DIR: mg_flight_set_dir; nothing is
 * written before it is set) on a watchdog timeout, before the job is ended
 * (the recorder registers its dump with the watchdog when it starts:
 * mg_watchdog_on_timeout); on a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGABRT) and on
 * SIGUSR2 once mg_flight_install_signals ran (SIGUSR2: the job goes on). The
 * writer uses async-signal-safe calls only (open, write, rename, mkdir: no
 * stdio, no malloc); the path and the host name are formatted beforehand. It
 * replaces only a dump it wrote (a file that starts with {"meshgrad_flight").
 * `meshgrad trace analyze DIR` reads the dumps (cli/trace.c). The format:
 *   {"meshgrad_flight":1,"reason":"SIGUSR2","rank":0,"world":2,"pid":..,
 *    "host":"..","now_ns":..,"step":12,"recorded":N,"capacity":C,
 *    "waiting_in":{"op":"data set read","dim":-1,"since_ns":..,"ranks":[0,1]}
 *    (the watchdog's operation in progress, when one is: also those the
 *    flight recorder does not see, as the collective I/O of HDF5),
 *    "comms":[{"index":0,"name":"meshgrad mesh dim 0","dim":0,"ordinal":0,
 *              "ranks":[0,1],"seq":41,"sends":[0,3],"recvs":[0,3]},
 *              ...],
 *    "entries":[{"id":7,"comm":0,"seq":41,"op":"all_reduce","dim":0,
 *                "peer":-1,"bytes":38440,"dtype":"float32","step":12,
 *                "state":"done","post_ns":..,"start_ns":..,"end_ns":..}, ...]}
 * (seq: collectives posted on the comm so far; sends, recvs: transfers to and
 * from each member; peer: the world rank of a transfer's other side, else -1;
 * times on this host's monotonic clock, 0 when not reached).
 *
 * A test hook: MG_TEST_SKIP_COLLECTIVE=RANK:K (read once) makes world rank
 * RANK skip its K-th collective (counting from 1): the call returns at once,
 * unrecorded, as a rank whose code took another branch would.
 *
 * The recorder also sums the time this rank spent blocked in collectives and
 * transfer waits (the progress line's communication wait).
 *
 * Exports: mg_flight_dtype, mg_flight_post, mg_flight_wait_begin,
 * mg_flight_done, mg_flight_set_step, mg_flight_set_dir, mg_flight_dump,
 * mg_flight_install_signals, mg_flight_wait_ns, mg_flight_free, MG_FLIGHT_SKIP. */
#ifndef MG_DIST_FLIGHT_H
#define MG_DIST_FLIGHT_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum {
    MG_FLIGHT_FLOAT32 = 0,
    MG_FLIGHT_INT64,
    MG_FLIGHT_FLOAT64,
    MG_FLIGHT_BYTE,
    MG_FLIGHT_STATUS, /* (status, rank) int pairs of mg_status_agree */
    MG_FLIGHT_DTYPES
} mg_flight_dtype;

/* mg_flight_post's answer when the test hook skips this collective */
#define MG_FLIGHT_SKIP (-2)

/* Records an operation on `comm` and returns its id (for the calls below; -1
 * when the recorder is off or has no record of the comm), or MG_FLIGHT_SKIP.
 * `op` must be a string literal. peer: the other side of a transfer (a rank of
 * comm) with send saying which way, or -1 for a collective. started: true for
 * a blocking call (it starts now), false for a non-blocking post (queued). */
int64_t mg_flight_post(MPI_Comm comm, const char *op, int64_t bytes, mg_flight_dtype dtype,
                       int peer, bool send, bool started);
/* A wait for a queued operation begins. */
void mg_flight_wait_begin(int64_t id);
/* The operation completed (or failed). */
void mg_flight_done(int64_t id);

/* The training step that later records belong to. */
void mg_flight_set_step(int64_t step);
/* Where dumps go: DIR/rank-<r>.json (DIR made when a dump is written; its
 * parent must exist). NULL or "": nowhere. MG_EINVAL for a path too long. */
int mg_flight_set_dir(const char *dir);
/* Writes the ring to DIR/rank-<r>.json; async-signal-safe. `reason` says why
 * ("SIGUSR2"). 0 when written, -1 when not (a line on stderr says why, unless
 * no directory was set or the recorder is off). */
int mg_flight_dump(const char *reason);
/* SIGUSR2 dumps; SIGSEGV, SIGBUS, SIGFPE and SIGABRT dump, then go on to the
 * handler that was there before (Open MPI's backtrace) or the default action. */
int mg_flight_install_signals(void);
/* Nanoseconds this rank spent blocked in collectives and transfer waits. */
int64_t mg_flight_wait_ns(void);
/* Restores the signal handlers and frees the ring (mg_finalize). */
void mg_flight_free(void);

#endif
