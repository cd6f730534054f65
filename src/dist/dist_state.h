/* dist_state.h: what the dist layer remembers between calls, behind the
 * context's layers.dist (context.h): made on first use by mg_dist, and at
 * each mg_context_reset emptied by mg_dist_state_reset (dist_state.c) but for
 * the live tensors and the freed headers held back, so the struct itself
 * stays for the process: a program may free its tensors after mg_finalize,
 * and mg_dtensor_free must then still know them. Included by dist/ and the
 * layers above it.
 * Exports: mg_dist_state, MG_FINALIZERS, MG_DTENSOR_QUARANTINE, mg_dist,
 * mg_dist_state_reset. */
#ifndef MG_DIST_STATE_H
#define MG_DIST_STATE_H

#include <stdint.h>

#include "context.h"

#define MG_FINALIZERS 8 /* dist/world.h: what mg_finalize runs for the files above world.c */
#define MG_DTENSOR_QUARANTINE 1024 /* dtensor.c: freed headers held back from malloc */

struct mg_dtensor;
struct mg_comm;
struct mg_reducer;
struct mg_watchdog;
struct mg_flight;
struct mg_comm_info;

struct mg_dist_state {
    int started, started_mpi; /* world.c: mg_init succeeded; it called MPI_Init */
    void (*finalizers[MG_FINALIZERS])(void); /* world.c: registered (world.h), run by */
    int n_finalizers;                        /* mg_finalize, the newest first */
    int node_rank;            /* world.c: this rank's place among the ranks on this machine */
    int node_is_world;        /* world.c: every rank runs on this machine */
    int node_cpus;            /* world.c: the CPUs this machine's ranks may run on together */
    int oversubscribed;       /* world.c: this machine's ranks outnumber those CPUs */
    int next_mesh_id;         /* mesh.c */
    int64_t mpi_max_count;    /* comm.c: the largest count per MPI call (0: INT_MAX) */
    struct mg_comm *world;    /* comm_control.c: the comm over MPI_COMM_WORLD */
    struct mg_comm **comms;   /* comm.c: live comms, whose counters mg_comm_stats sums */
    int n_comms, cap_comms;
    mg_comm_stats retired[MG_COLL_COUNT]; /* comm.c: counters of comms already freed */
    /* comm.c: the deterministic mode's sum, comm_tree.c's (mg_comm_on_tree_sum) */
    int (*comm_tree_sum)(struct mg_comm *c, const float *send, float *recv, int64_t n,
                         int scatter);
    struct mg_reducer *reducer;           /* reducer.c */
    struct mg_watchdog *watchdog;         /* watchdog.c */
    int (*watchdog_on_timeout)(const char *reason); /* watchdog.c: run on a timeout before
                                                     * the job ends (flight.c's dump) */
    struct mg_flight *flight;             /* flight.c: the flight recorder */
    int comm_keyval;                      /* comm_info.c: the MPI attribute key + 1 (0: none) */
    struct mg_comm_info **comm_info;      /* comm_info.c: every communicator seen (a fixed */
    int n_comm_info;                      /* table, never moved: signal handlers read it) */
    struct mg_comm_info **comm_info_extra; /* comm_info.c: the records past the table's room */
    int n_comm_info_extra, cap_comm_info_extra;
    mg_staging staging[MG_DEVICE_KINDS][2]; /* redistribute.c: per device, two buffers */
    /* dtensor.c: run as a heap tensor is freed (the reducer's mg_reducer_forget) */
    void (*dtensor_on_free)(const struct mg_dtensor *t);

    /* ---- kept by mg_context_reset (a program may free its tensors after
     * mg_finalize): mg_dist_state_reset zeroes only what comes before ---- */
    /* dtensor.c: every tensor on the heap not yet freed (mg_distribute, mg_from_local,
     * gradients, optimizer state), so that mg_dtensor_free knows a tensor freed
     * twice and mg_mesh_free a mesh still in use */
    struct mg_dtensor **live;
    int n_live, cap_live;
    /* dtensor.c: the headers freed last, held back from malloc a while (a
     * pointer kept to one is not taken for a new tensor that malloc put at
     * its address), the oldest given back as each new one comes */
    struct mg_dtensor *quarantine[MG_DTENSOR_QUARANTINE];
    int quarantine_next;
};
typedef struct mg_dist_state mg_dist_state;

/* Frees the comm registry and zeroes the members before `live` (the kept ones
 * come last) (mg_context_on_reset: at every reset; nothing when the state was
 * not made).
 * The rest of what the layer holds mg_finalize freed before (world.c). */
void mg_dist_state_reset(void);

/* The dist layer's state, made on first use; never freed, so once made the
 * watchdog's thread and the signal handlers read it where it is. */
MG_CONTEXT_LAYER(mg_dist, mg_dist_state, dist, mg_dist_state_reset)

#endif
