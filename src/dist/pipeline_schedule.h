/* pipeline_schedule.h: pipeline-parallel schedules as plain data. A schedule
 * is, for each rank of the pipeline mesh dim, the ordered list of what that
 * rank does in one training step: forwards, backwards, sends and receives of
 * activations and gradients, and the gradient reduction at the end. One small
 * generator per schedule makes the lists; pipeline_verify.h proves them,
 * pipeline_sim.h times them; one executor (nn/pipeline_exec.h) runs any list
 * as a loop over its actions.
 *
 * Stages and ranks. The model's layers are cut into `stages` contiguous
 * stages, stage s on pipeline rank s % ranks: with v virtual stages per rank
 * (interleaved-1f1b) rank r holds stages r, r + ranks, r + 2 ranks, ...
 * Micro-batch mb of stage s is written (mb, s). Micro-batches may have
 * different sizes: actions carry only the index; the rows travel with the
 * activations (mg_pp_microbatch_rows gives the split of a batch).
 *
 * The actions, each naming a stage held by the rank that runs it:
 *   F   forward of (mb, s); on the last stage it computes the loss too.
 *   B   backward of (mb, s): input and weight gradients (gpipe, 1f1b, interleaved).
 *   Bi  backward-input of (mb, s): the input gradient only (zero-bubble).
 *   W   backward-weight of (mb, s): the weight gradient (zero-bubble), after Bi.
 *   send-act (mb, s) -> peer   the output of stage s to the rank of stage s+1
 *   recv-act (mb, s) <- peer   the input of stage s from the rank of stage s-1
 *   send-grad (mb, s) -> peer  the input gradient of stage s to stage s-1's rank
 *   recv-grad (mb, s) <- peer  the output gradient of stage s from stage s+1's rank
 *   reduce-grad s              stage s's parameter gradients are complete: hand
 *                              them to the gradient reducer (once, at the end)
 * A send or receive is posted where it stands in the list and matched with
 * the peer's in order (see pipeline_sim.h for the exact semantics).
 *
 * An executor is one loop over its rank's list (the lists are proven for
 * exactly this):
 *   a run of sends and receives (i .. mg_pp_batch_end):  group_begin; post
 *       each with mg_comm_isend / mg_comm_irecv on the pipeline dim's comm
 *       (send-act: the stage's output of mb; recv-act: into mb's input of the
 *       stage; the grads likewise), keeping the request by (op, mb, stage);
 *       group_end (comm.h's point-to-point)
 *   F, B, Bi   wait for the receive it consumes (if its input comes from
 *              another rank), then compute
 *   W          compute
 *   reduce-grad  the stage's backward is over for this step: tell the
 *              gradient reducer (the last micro-batch's hook)
 *   at the end wait for every send.
 *
 * Exports: mg_pp_kind, mg_pp_op, mg_pp_action, mg_pp_schedule,
 * mg_pp_kind_parse, mg_pp_kind_name, mg_pp_schedule_check, mg_pp_schedule_make,
 * mg_pp_schedule_free, mg_pp_stage_rank, mg_pp_action_format, mg_pp_op_name,
 * mg_pp_op_is_p2p, mg_pp_op_is_compute, mg_pp_batch_end, mg_pp_microbatch_rows. */
#ifndef MG_PIPELINE_SCHEDULE_H
#define MG_PIPELINE_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    MG_PP_GPIPE = 0,          /* all forwards, then all backwards */
    MG_PP_1F1B,               /* warm-up forwards, then one forward one backward */
    MG_PP_INTERLEAVED_1F1B,   /* 1f1b over v virtual stages per rank (Megatron) */
    MG_PP_ZB_H1,              /* 1f1b with split backward, W filling the bubbles */
    MG_PP_KIND_COUNT
} mg_pp_kind;

typedef enum {
    MG_PP_FORWARD = 0,
    MG_PP_BACKWARD,        /* input and weight gradients in one */
    MG_PP_BACKWARD_INPUT,
    MG_PP_BACKWARD_WEIGHT,
    MG_PP_SEND_ACT,
    MG_PP_RECV_ACT,
    MG_PP_SEND_GRAD,
    MG_PP_RECV_GRAD,
    MG_PP_REDUCE_GRAD,
    MG_PP_OP_COUNT
} mg_pp_op;

typedef struct {
    uint8_t op;    /* mg_pp_op */
    int16_t stage; /* a stage of the rank running the action */
    int16_t peer;  /* send/recv: the other pipeline rank; -1 otherwise */
    int32_t mb;    /* micro-batch; -1 for reduce-grad */
} mg_pp_action;

typedef struct {
    mg_pp_kind kind;
    int ranks;          /* p: the pipeline mesh dim's size */
    int virtual_stages; /* v: stages per rank (1 but for interleaved-1f1b) */
    int stages;         /* p * v */
    int microbatches;   /* M */
    int *len;           /* len[r]: number of actions of rank r */
    mg_pp_action **actions; /* actions[r][0 .. len[r]) */
} mg_pp_schedule;

#define MG_PP_MAX_RANKS 1024
#define MG_PP_MAX_STAGES 4096
#define MG_PP_MAX_MICROBATCHES 65536

/* "gpipe", "1f1b", "interleaved-1f1b", "zb-h1"; MG_EINVAL with a message that
 * lists them otherwise. */
int mg_pp_kind_parse(const char *text, mg_pp_kind *kind);
const char *mg_pp_kind_name(mg_pp_kind kind);
/* What the schedule needs of p ranks, v virtual stages and M micro-batches:
 * MG_OK, or MG_EINVAL with a message saying what it needs and what to change.
 *   every schedule   p >= 1, M >= 1; v == 1 unless interleaved-1f1b
 *   1f1b, zb-h1      M >= p (fewer micro-batches than ranks: use gpipe)
 *   interleaved      M >= p, and M a multiple of p when v > 1 (Megatron's
 *                    groups of p micro-batches per virtual stage) */
int mg_pp_schedule_check(mg_pp_kind kind, int ranks, int virtual_stages, int microbatches);
/* Makes the per-rank action lists (freed by mg_pp_schedule_free). MG_EINVAL
 * as mg_pp_schedule_check, MG_ENOMEM. */
int mg_pp_schedule_make(mg_pp_schedule *s, mg_pp_kind kind, int ranks, int virtual_stages,
                        int microbatches);
void mg_pp_schedule_free(mg_pp_schedule *s);

static inline int mg_pp_stage_rank(const mg_pp_schedule *s, int stage) { return stage % s->ranks; }
static inline int mg_pp_op_is_p2p(int op) { return op >= MG_PP_SEND_ACT && op <= MG_PP_RECV_GRAD; }
/* F, B, Bi and W: the actions that compute */
static inline int mg_pp_op_is_compute(int op) {
    return op >= MG_PP_FORWARD && op <= MG_PP_BACKWARD_WEIGHT;
}
/* The batch of transfers starting at action i of rank r ends before the
 * returned index: the first action after i that is not a send or a receive. */
static inline int mg_pp_batch_end(const mg_pp_schedule *s, int r, int i) {
    while (i < s->len[r] && mg_pp_op_is_p2p(s->actions[r][i].op)) i++;
    return i;
}
/* "F", "B", "Bi", "W", "send-act", ... */
const char *mg_pp_op_name(int op);
/* "F 3 s1", "send-act 3 s1 -> 2", "reduce-grad s1" into buf; returns buf. */
char *mg_pp_action_format(char *buf, size_t len, const mg_pp_action *a);

/* Rows of each of M micro-batches of a batch of `batch` rows, as torch.chunk
 * splits it: ceil(batch / M) rows each, the last one smaller. MG_EINVAL with
 * a message when that leaves a micro-batch empty (batch 10 in 6: chunks of 2
 * fill only 5). */
int mg_pp_microbatch_rows(int64_t batch, int microbatches, int64_t *rows);

#endif
