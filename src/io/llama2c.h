/* llama2c.h: llama2.c's version-0 model file, as its export.py's
 * legacy_export writes it and its run.c reads it: seven int32 (dim,
 * hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, max_seq_len; the
 * vocabulary negative when the classifier is not the embedding), then
 * float32 arrays with nothing between them:
 *
 *   token embedding (vocab, dim)
 *   per layer, each array for all layers in turn: attention norm (dim),
 *   wq (heads D, dim), wk (kv_heads D, dim), wv (kv_heads D, dim),
 *   wo (dim, heads D), ffn norm (dim), w1 (hidden, dim), w2 (dim, hidden),
 *   w3 (hidden, dim)                                    D = dim / heads
 *   final norm (dim)
 *   freq_cis real and imaginary (max_seq_len, D / 2) each: RoPE's cos and
 *   sin at theta 10000 (run.c skips them)
 *   classifier (vocab, dim), only when the vocabulary is negative
 *
 * mg_l2c_open checks the header before anything else is read: every size
 * >= 1, heads dividing dim into an even head size, kv_heads dividing heads,
 * and the file exactly as long as the header says (no overflow on the way);
 * otherwise one line naming the file (MG_EFORMAT). Reads are bounded by that
 * length. mg_l2c_write writes one as a save does (files.h): a temporary file,
 * its space reserved, renamed over the target only where nothing is or a
 * llama2.c file (mg_l2c_is_one). Local and serial. Exports mg_l2c_header,
 * mg_l2c_file, mg_l2c_open, mg_l2c_read, mg_l2c_close, mg_l2c_floats,
 * mg_l2c_header_check, mg_l2c_is_one, mg_l2c_part, mg_l2c_write,
 * MG_L2C_HEADER_BYTES. */
#ifndef MG_IO_LLAMA2C_H
#define MG_IO_LLAMA2C_H

#include <stdint.h>

#include "io/files.h"

#define MG_L2C_HEADER_BYTES 28

typedef struct {
    int64_t dim, hidden, layers, heads, kv_heads, vocab, seq_len; /* vocab > 0 */
    int shared; /* the classifier is the embedding (the file's vocabulary > 0) */
} mg_l2c_header;

typedef struct {
    char path[MG_PATH_MAX];
    int fd;
    uint64_t size;
    mg_l2c_header h;
} mg_l2c_file;

/* The floats after the header that h asks for (-1 when more than a file
 * can hold). */
int64_t mg_l2c_floats(const mg_l2c_header *h);
/* MG_OK when h's sizes can be (as above, not the length), else MG_EFORMAT
 * naming `path` and the size. */
int mg_l2c_header_check(const mg_l2c_header *h, const char *path);
int mg_l2c_open(mg_l2c_file *f, const char *path);
/* n floats from float index `at` after the header (bounded by the length). */
int mg_l2c_read(const mg_l2c_file *f, int64_t at, int64_t n, float *out);
void mg_l2c_close(mg_l2c_file *f);
/* 1 when `path` is a regular file whose header and length agree. */
int mg_l2c_is_one(const char *path);

/* A run of floats of the file, in order. */
typedef struct {
    const float *data;
    int64_t n;
} mg_l2c_part;
/* The header of h, then the n parts, to `target` (their floats must sum to
 * mg_l2c_floats(h)). */
int mg_l2c_write(const char *target, const mg_l2c_header *h, const mg_l2c_part *parts, int n);

#endif
