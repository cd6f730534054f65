/* api.h: what the files of the training API (meshgrad_train.h) share: the
 * optimizer handle, which the checkpoints read, and the checks every call
 * makes of its arguments.
 *
 * The API is a thin layer over the library's own training code: an mg_optim
 * is the optimizer of `meshgrad train` (nn/optim.h) over a parameter table
 * whose entries are the caller's tensors; checkpoints are io/checkpoint.h's,
 * with the entries and attributes nn/train_state.h writes; the loader is
 * io/tokens.h's.
 *
 * Exports: struct mg_optim, mg_api_hash, mg_api_hash_tensor, mg_api_agree, mg_api_name_check,
 * mg_api_tensor_check. */
#ifndef MG_TRAIN_API_H
#define MG_TRAIN_API_H

#include <stddef.h>
#include <stdint.h>

#include "hash.h"
#include "meshgrad_train.h"
#include "nn/optim.h"

struct mg_optim {
    mg_optimizer opt;      /* kind, settings, updates taken */
    mg_param_table params; /* p[i].value: the caller's tensor (not owned); state owned */
    int holders;           /* checkpoints that hold it (mg_ckpt_set_optim): mg_optim_free refuses */
};

#define MG_API_HASH_START MG_HASH_START
/* FNV-1a 64 of n bytes, continuing from h. */
uint64_t mg_api_hash(uint64_t h, const void *p, size_t n);
/* The same of a name and a tensor's global shape and placements. */
uint64_t mg_api_hash_tensor(uint64_t h, const char *name, const mg_dtensor *t);
/* Collective over the world. rc: this rank's verdict on its arguments (its
 * message set when not MG_OK); hash: a digest of them. MG_OK when every rank
 * said MG_OK with the same digest; else every rank returns one error: the
 * lowest failing rank's, or "<who>: the ranks disagree on <what>...". */
int mg_api_agree(int rc, uint64_t hash, const char *who, const char *what);
/* A tensor or attribute name: 1..63 of [A-Za-z0-9_.-], not starting with
 * '.' (a dataset name in every checkpoint, one level deep). */
int mg_api_name_check(const char *who, const char *kind, const char *name);
/* A tensor the caller keeps: made by mg_distribute or mg_from_local and not
 * freed (not an op's result, freed at mg_step_end; a freed one is refused
 * without being read), with no Partial placement unless partial_ok. */
int mg_api_tensor_check(const char *who, const char *name, const mg_dtensor *t, int partial_ok);

#endif
