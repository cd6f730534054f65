/* tokens.h: token data sets (docs/DESIGN.md "Token data sets") and the window
 * loader.
 *
 * File layout (docs/DATA.md): /train/tokens and /val/tokens, 1-D uint8
 * (bytes: vocabulary 256), uint16 (a vocabulary up to 65536: GPT-2's BPE, as
 * nanoGPT and llm.c store it) or int32; root attributes "vocab_size", "vocab"
 * (its kind, e.g. "bytes"), "source" and "license". Written by `meshgrad data
 * text2h5` (cli/data_text.c) and `meshgrad data bin2h5` (cli/data_bin.c).
 *
 * A training batch is B windows of T+1 tokens: window `row` of step `step`
 * starts at a position drawn by Philox(seed, stream = 2^62 + step, index =
 * row), uniform over [0, N - T - 1] (32 random bits scaled to the span), so
 * every mesh and every resume sees the same windows. x holds tokens [start, start + T) and y tokens [start + 1,
 * start + T + 1), both as floats (ids are exact up to 2^24). Evaluation walks
 * every non-overlapping T-window of a split: window k starts at k T.
 *
 * Each rank opens the file on its own (no collective I/O: a stalled rank cannot
 * hold the others inside HDF5) and reads only the windows and columns that
 * the given specs put on it (a Shard of the batch dim or of the sequence dim).
 * Errors one rank meets are agreed over the comm, so every rank returns the
 * same status with the failing rank's message.
 *
 * Exports: mg_tokens, mg_tokens_open, mg_tokens_close, mg_tokens_count,
 * mg_tokens_vocab, mg_tokens_train_starts, mg_tokens_eval_windows,
 * mg_tokens_eval_starts, mg_tokens_batch, mg_tokens_read. */
#ifndef MG_IO_TOKENS_H
#define MG_IO_TOKENS_H

#include <stdint.h>

#include "dist/comm.h"
#include "dist/dtensor.h"

typedef struct mg_tokens mg_tokens;

/* Collective over `comm`. Opens `split` ("train" or "val") of a token data set:
 * the dataset is 1-D uint8, uint16 or int32 and not empty, vocab_size is 1..2^24 and
 * every token of the split is below it (checked once, as it is read). NULL
 * with a message naming the file, the split and the problem (agreed). */
mg_tokens *mg_tokens_open(const char *path, const char *split, mg_comm *comm);
void mg_tokens_close(mg_tokens *);
int64_t mg_tokens_count(const mg_tokens *); /* tokens in the split */
int mg_tokens_vocab(const mg_tokens *);     /* vocab_size */

/* The B window starts of training step `step` (T + 1 tokens each; the split
 * must hold at least T + 1 tokens). */
void mg_tokens_train_starts(const mg_tokens *, uint64_t seed, int64_t step, int64_t B, int64_t T,
                            int64_t *starts);
/* How many non-overlapping evaluation windows of T + 1 tokens the split
 * holds: floor((N - 1) / T). */
int64_t mg_tokens_eval_windows(const mg_tokens *, int64_t T);
/* Starts of evaluation windows first .. first + n - 1: (first + i) T. */
void mg_tokens_eval_starts(int64_t first, int64_t n, int64_t T, int64_t *starts);

/* Collective over the comm of mg_tokens_open. The batch of the B windows at
 * starts[0..B): x (B, T) with spec x_spec and y (B, T) with spec y_spec
 * (global shapes; any placements but Partial), from `arena` (NULL: heap). */
int mg_tokens_batch(mg_tokens *, const int64_t *starts, int64_t B, int64_t T,
                    const mg_spec *x_spec, const mg_spec *y_spec, mg_dtensor **x, mg_dtensor **y,
                    mg_arena *arena);
/* Not collective: tokens [first, first + n) of the split into out. */
int mg_tokens_read(mg_tokens *, int64_t first, int64_t n, float *out);

#endif
