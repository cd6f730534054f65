/* eval.c: `meshgrad eval`: a checkpoint's model, from its attributes
 * (nn/arch.h), on any mesh and plan:
 *
 *   eval --resume CKPT --data H5 [--split val|train] [--eval-tokens N]
 *        [--batch B] [--mesh M] [--parallel P] ...
 *     the mean loss over the split's non-overlapping ctx-windows (at most
 *     --eval-tokens tokens of them, from the start), and its perplexity:
 *     the evaluation of `meshgrad train` itself (mg_trainer_evaluate) on a
 *     run built for it, in chunks of the checkpoint's batch (data.batch), so
 *     it prints the val loss train printed for the same parameters; pp
 *     included.
 *   eval --resume CKPT --text FILE --logits OUT.h5 [--mesh M] [--parallel P]
 *     one sequence, the file's bytes as tokens (its first ctx), through the
 *     model: dataset "logits" (T, V) float32 of OUT.h5 (rank 0 writes it as
 *     a save does, io/files.h: an existing OUT only with --overwrite, and
 *     only a logits file eval wrote). No pp: each rank runs every block.
 *
 * Exports mg_cli_eval (cli.h). */
#include <errno.h>
#include <getopt.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/backend.h"
#include "cli/cli.h"
#include "context.h"
#include "dist/comm.h"
#include "dist/mesh.h"
#include "io/checkpoint.h"
#include "io/files.h"
#include "io/h5util.h"
#include "nn/arch.h"
#include "nn/train_state.h"
#include "status.h"
#include "train/config.h"
#include "train/trainer.h"

#define LOGITS_FORMAT "meshgrad-logits"
#define MAX_ATTRS 512

typedef struct {
    char resume[MG_PATH_MAX], path[MG_PATH_MAX]; /* as given; the file it names */
    const char *data, *split, *text, *logits;
    int overwrite, batch_given;
    mg_train_config *cfg; /* mesh, parallel, threads, batch, eval-tokens, pp flags */
} eval_opts;

static const char *usage_text =
    "usage: meshgrad eval --resume CKPT --data H5 [--split val|train] [--eval-tokens N]\n"
    "                     [--batch B] [--mesh M] [--parallel P] [--threads N] [--deterministic]\n"
    "       meshgrad eval --resume CKPT --text FILE --logits OUT.h5 [--overwrite]\n"
    "                     [--mesh M] [--parallel P] [--threads N] [--deterministic]\n"
    "\n"
    "Evaluates the model of checkpoint CKPT (a file, or a directory: its newest), written by\n"
    "`meshgrad train` or `meshgrad ckpt import`, on any mesh and plan:\n"
    "  --data H5          a token data set (meshgrad data text2h5) of the model's vocabulary:\n"
    "                     prints eval_loss (the mean over the split's non-overlapping\n"
    "                     ctx-windows, as train's val_loss) and its perplexity\n"
    "  --split S          val (default) or train\n"
    "  --eval-tokens N    tokens of the split to read, from its start (default 65536; all)\n"
    "  --batch B          windows per chunk (default: the checkpoint's data.batch)\n"
    "  --text FILE        one sequence: the file's bytes as tokens (its first ctx of them)\n"
    "  --logits OUT.h5    ... whose logits (T, V) float32 go to dataset \"logits\" of OUT.h5\n"
    "  --overwrite        replace an OUT.h5 that exists (a logits file of eval only)\n"
    "  --mesh M           device mesh: 2, 4, 1x2, 2x2 (default: 1-D over all ranks)\n"
    "  --parallel P       one plan per mesh dim: dp, tp, fsdp, sp, tp+sp, pp (pp: --data only)\n"
    "  --threads N        CPU threads per rank (default: cores / ranks)\n"
    "  --deterministic    every sum in one fixed order: the same loss and logits on every mesh\n"
    "  --device D, --pp-schedule S, --microbatches M, --pp-layers L: as for train\n";

/* The flags eval hands to the run's config, as train takes them. */
static const char *const passed[] = {"mesh", "parallel", "threads", "batch", "eval-tokens",
                                     "device", "pp-schedule", "microbatches", "pp-layers"};
enum { NPASSED = sizeof passed / sizeof passed[0] };

/* 0, 1 (--help shown) or 2 (a usage error). */
static int parse(int argc, char **argv, eval_opts *o) {
    struct option opts[NPASSED + 10] = {
        {"resume", 1, 0, 'r'}, {"data", 1, 0, 'd'},    {"split", 1, 0, 's'},
        {"text", 1, 0, 'x'},   {"logits", 1, 0, 'l'},  {"overwrite", 0, 0, 'o'},
        {"help", 0, 0, 'h'},   {"config", 1, 0, 'c'},  {"deterministic", 0, 0, 'D'}};
    for (int i = 0; i < NPASSED; i++) opts[9 + i] = (struct option){passed[i], 1, 0, 1000 + i};
    int c, rc = MG_OK;
    opterr = 0;
    while (rc == MG_OK && (c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'r': snprintf(o->resume, sizeof o->resume, "%s", optarg); break;
        case 'd': o->data = optarg; break;
        case 's': o->split = optarg; break;
        case 'x': o->text = optarg; break;
        case 'l': o->logits = optarg; break;
        case 'o': o->overwrite = 1; break;
        case 'D': rc = mg_train_config_set_at(o->cfg, "deterministic", "1", "--deterministic"); break;
        case 'c':
            rc = mg_error(MG_EINVAL, "eval: the model comes from --resume CKPT, not a config file");
            break;
        case 'h':
            if (mg_rank() == 0) fputs(usage_text, stdout);
            return 1;
        default:
            if (c >= 1000 && c < 1000 + NPASSED) {
                char where[32];
                snprintf(where, sizeof where, "--%s", passed[c - 1000]);
                rc = mg_train_config_set_at(o->cfg, passed[c - 1000], optarg, where);
                o->batch_given |= c - 1000 == 3;
                break;
            }
            if (mg_rank() == 0) fputs(usage_text, stderr);
            mg_cli_bad_flag("eval", argv);
            return 2;
        }
    }
    if (rc == MG_OK) rc = mg_cli_no_arguments_left("eval", argc, argv);
    if (rc == MG_OK && !o->resume[0])
        rc = mg_error(MG_EINVAL, "eval: no checkpoint given: --resume CKPT");
    if (rc == MG_OK && !o->text != !o->logits)
        rc = mg_error(MG_EINVAL, "eval: --text FILE and --logits OUT.h5 go together");
    if (rc == MG_OK && o->text && (o->data || o->split))
        rc = mg_error(MG_EINVAL, "eval: --text runs one sequence; --data and --split evaluate a "
                      "data set: give one or the other");
    if (rc == MG_OK && !o->text && !o->data)
        rc = mg_error(MG_EINVAL, "eval: no --data: give a token data set (e.g. data/mobydick.h5), "
                      "or --text FILE --logits OUT.h5");
    if (rc == MG_OK && o->logits) rc = mg_path_check(o->logits, "--logits", MG_TMP_SUFFIX_MAX);
    if (!o->split) o->split = "val";
    return rc == MG_OK ? 0 : 2;
}

/* Collective: the checkpoint's file (rank 0 resolves a directory), its
 * model and its data.batch (0 when it has none). */
static int read_checkpoint(eval_opts *o, mg_comm *world, mg_arch *a, int64_t *batch) {
    int rc = MG_OK;
    if (mg_rank() == 0) rc = mg_checkpoint_resolve(o->resume, o->path, sizeof o->path);
    if ((rc = mg_status_agree(rc)) != MG_OK) return rc;
    if ((rc = mg_comm_broadcast_bytes(world, o->path, sizeof o->path, 0)) != MG_OK) return rc;
    mg_ckpt_attr *attrs = calloc(MAX_ATTRS, sizeof *attrs);
    int n = 0;
    rc = attrs ? mg_checkpoint_read_attrs(o->path, attrs, MAX_ATTRS, &n)
               : mg_error(MG_ENOMEM, "eval: out of memory");
    if (rc == MG_OK) rc = mg_arch_from_attrs(a, attrs, n, o->path);
    const char *b = rc == MG_OK ? mg_ckpt_attr_get(attrs, n, "data.batch") : NULL;
    char *end = NULL;
    long long v = b ? strtoll(b, &end, 10) : 0;
    *batch = b && *b && !*end && v > 0 ? v : 0;
    free(attrs);
    if ((rc = mg_status_agree(rc)) != MG_OK) return rc;
    return mg_arch_check_file(a, o->path); /* before a model of that size is made */
}

/* ---- the loss over a split ---------------------------------------------------------- */

static int eval_loss(eval_opts *o) {
    mg_train_config *c = o->cfg;
    mg_comm *world = mg_comm_world();
    mg_arch a;
    int64_t saved_batch = 0;
    int rc = read_checkpoint(o, world, &a, &saved_batch);
    if (rc == MG_OK) rc = mg_train_config_from_arch(c, &a);
    if (rc != MG_OK) return rc;
    snprintf(c->data, sizeof c->data, "%s", o->data);
    if (!o->batch_given && saved_batch > 0) c->batch = saved_batch;
    c->optimizer = MG_OPTIM_SGD; /* no state: nothing is trained */
    c->log_every = 0;
    mg_trainer *tr = mg_trainer_new(c, NULL);
    if (!tr) return mg_last_code();
    int64_t vocab = mg_tokens_vocab(tr->tokens);
    if (vocab != a.vocab)
        rc = mg_error(MG_EINVAL, "eval: checkpoint %s has a vocabulary of %lld tokens but %s one "
                      "of %lld: evaluate it on a data set of its own vocabulary", o->path,
                      (long long)a.vocab, o->data, (long long)vocab);
    if (rc == MG_OK) rc = mg_trainer_text_eval_split(tr, o->split);
    if (rc == MG_OK) rc = mg_trainer_load_params(tr, o->path);
    mg_train_eval ev = {0};
    double t0 = mg_clock();
    if (rc == MG_OK) rc = mg_trainer_evaluate(tr, &ev);
    if (rc == MG_OK && mg_rank() == 0) {
        char model[256];
        mg_arch_describe(&a, model, sizeof model);
        printf("eval_loss %.9g | perplexity %.6g | %lld windows of %lld tokens of %s /%s | %s | "
               "%.2f s\n", ev.loss, exp(ev.loss), (long long)ev.rows, (long long)c->ctx, o->data,
               o->split, model, mg_clock() - t0);
    }
    char msg[1024]; /* main.c prints it once; keep it across the frees */
    snprintf(msg, sizeof msg, "%s", mg_last_error());
    mg_trainer_free(tr);
    return rc == MG_OK ? rc : mg_error(rc, "%s", msg);
}

/* ---- the logits of one text ------------------------------------------------------------ */

/* A file eval may replace with --overwrite: an HDF5 file of its logits. */
static int is_logits(const char *path) {
    if (H5Fis_hdf5(path) <= 0) return 0;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    char fmt[64] = "";
    int ok = f >= 0 && mg_h5_attr_read_text(f, "format", fmt, sizeof fmt) == 0 &&
             strcmp(fmt, LOGITS_FORMAT) == 0;
    if (f >= 0) H5Fclose(f);
    return ok;
}

/* Rank 0: the text's first `ctx` bytes into ids (n of them), checked
 * against the vocabulary. */
static int read_text(const eval_opts *o, const mg_arch *a, int *ids, int64_t *n) {
    FILE *f = fopen(o->text, "rb");
    if (!f) return mg_error(MG_EIO, "eval: cannot read --text %s: %s", o->text, strerror(errno));
    int64_t k = 0;
    int ch;
    while (k < a->ctx && (ch = fgetc(f)) != EOF) ids[k++] = ch;
    int more = fgetc(f) != EOF, bad = ferror(f);
    fclose(f);
    if (bad) return mg_error(MG_EIO, "eval: cannot read --text %s", o->text);
    if (k == 0) return mg_error(MG_EINVAL, "eval: --text %s is empty: give at least one byte", o->text);
    for (int64_t i = 0; i < k; i++)
        if (ids[i] >= a->vocab)
            return mg_error(MG_EINVAL, "eval: byte %lld of --text %s is %d, outside the model's "
                            "vocabulary of %lld", (long long)i, o->text, ids[i], (long long)a->vocab);
    if (more)
        fprintf(stderr, "note: --text %s is longer than the model's ctx %lld: using its first "
                "%lld bytes\n", o->text, (long long)a->ctx, (long long)a->ctx);
    *n = k;
    return MG_OK;
}

/* Rank 0: OUT.h5 with dataset logits (T, V) and a few attributes. */
static int write_logits(const eval_opts *o, const float *logits, int64_t T, int64_t V) {
    int exists;
    int rc = mg_file_replaceable(o->logits, "logits file of meshgrad eval", is_logits, &exists);
    mg_tmp_file tmp = {.fd = -1};
    if (rc == MG_OK) rc = mg_tmp_create(&tmp, o->logits);
    if (rc != MG_OK) return rc;
    hid_t f = H5Fcreate(tmp.path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[2] = {(hsize_t)T, (hsize_t)V};
    hid_t sp = f >= 0 ? H5Screate_simple(2, dims, NULL) : -1;
    hid_t d = sp >= 0 ? H5Dcreate2(f, "logits", H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT,
                                   H5P_DEFAULT)
                      : -1;
    int bad = d < 0 || H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, logits) < 0;
    bad |= f < 0 || mg_h5_attr_write_string(f, "format", LOGITS_FORMAT) != 0 ||
           mg_h5_attr_write_string(f, "checkpoint", o->path) != 0 ||
           mg_h5_attr_write_string(f, "text", o->text) != 0;
    if (d >= 0) H5Dclose(d);
    if (sp >= 0) H5Sclose(sp);
    if (f >= 0 && H5Fclose(f) < 0) bad = 1;
    if (bad) {
        mg_tmp_discard(&tmp);
        return mg_error(MG_EIO, "eval: writing --logits %s failed", o->logits);
    }
    return mg_tmp_commit(&tmp, o->logits, "logits file of meshgrad eval", is_logits);
}

/* Collective: the mesh and plan of --mesh and --parallel (no pp). */
static int make_mesh(const mg_train_config *c, mg_mesh **mesh, mg_plan *plan) {
    if (!(*mesh = mg_trainer_mesh_new(c->mesh, c->device))) return mg_last_code();
    int rc = mg_plan_parse(c->parallel, plan);
    if (rc == MG_OK) rc = mg_plan_check(plan, *mesh, INT64_MAX); /* no batch to split */
    if (rc == MG_OK && mg_plan_pp_dim(plan) >= 0)
        rc = mg_error(MG_EINVAL, "eval: --parallel %s has pp; --logits runs every block on each "
                      "rank: give dp, tp, fsdp, sp or tp+sp (the loss over --data takes pp)",
                      c->parallel);
    return rc;
}

/* Collective: logits (T, V) of ids[0..T) on every rank. */
static int forward(mg_model *model, const mg_mesh *mesh, const int *ids, int64_t T, float *out) {
    mg_tensor *t = mg_tensor_new(2, (int64_t[]){1, T});
    if (!t) return mg_last_code();
    for (int64_t i = 0; i < T; i++) mg_tensor_data(t)[i] = (float)ids[i];
    mg_placement rep[MG_MAX_MESH_DIMS];
    for (int d = 0; d < mesh->ndim; d++) rep[d] = MG_REPLICATE;
    mg_dtensor *x = mg_distribute(mesh, t, rep, mesh->ndim);
    mg_tensor_free(t);
    int prev = mg_set_grad_enabled(0);
    mg_dtensor *y = x ? mg_model_forward(model, x) : NULL; // y: (1, T, V)
    mg_tensor *full = y ? mg_full_tensor(y) : NULL;
    mg_set_grad_enabled(prev);
    int rc = full ? MG_OK : mg_last_code() ? mg_last_code() : MG_ENOMEM;
    if (full) memcpy(out, mg_tensor_data(full), sizeof(float) * (size_t)mg_tensor_numel(full));
    mg_tensor_free(full);
    mg_dtensor_free(x);
    mg_step_end();
    return rc;
}

static int eval_logits(eval_opts *o) {
    mg_train_config *c = o->cfg;
    if (c->threads > 0) mg_backend_cpu_set_threads((int)c->threads);
    if (c->deterministic && strcmp(c->device, "cpu") != 0)
        return mg_error(MG_EINVAL, "eval: --deterministic runs on the CPU only: drop --device %s",
                        c->device);
    if (c->deterministic && mg_set_deterministic(1) != MG_OK) return mg_last_code();
    mg_mesh *mesh = NULL;
    mg_plan plan;
    mg_model model;
    int have_model = 0, rc = make_mesh(c, &mesh, &plan);
    mg_arch a;
    int64_t unused, T = 0;
    if (rc == MG_OK) rc = read_checkpoint(o, mesh->world, &a, &unused);
    int *ids = rc == MG_OK ? calloc((size_t)a.ctx + 1, sizeof *ids) : NULL;
    if (rc == MG_OK && !ids) rc = mg_error(MG_ENOMEM, "eval: out of memory");
    if (rc == MG_OK && mg_rank() == 0) {
        rc = read_text(o, &a, ids, &T);
        if (rc == MG_OK && mg_path_same_file(o->logits, o->path))
            rc = mg_error(MG_EINVAL, "eval: --logits %s is the checkpoint", o->logits);
        int exists = 0;
        if (rc == MG_OK)
            rc = mg_file_replaceable(o->logits, "logits file of meshgrad eval", is_logits, &exists);
        if (rc == MG_OK && exists && !o->overwrite)
            rc = mg_error(MG_EIO, "will not replace %s: it exists; give --overwrite to replace it "
                          "(only a logits file of eval is replaced)", o->logits);
    }
    rc = mesh ? mg_status_agree(rc) : rc;
    if (rc == MG_OK) rc = mg_comm_broadcast_bytes(mesh->world, &T, sizeof T, 0);
    if (rc == MG_OK) rc = mg_comm_broadcast_bytes(mesh->world, ids, (int64_t)sizeof *ids * T, 0);
    if (rc == MG_OK && (rc = mg_arch_build(&model, &a, mesh, &plan)) == MG_OK) have_model = 1;
    if (rc == MG_OK) rc = mg_train_state_load_params(o->path, &model);
    float *logits = rc == MG_OK ? malloc(sizeof(float) * (size_t)(T * a.vocab)) : NULL;
    if (rc == MG_OK && !logits) rc = mg_error(MG_ENOMEM, "eval: out of memory for the logits");
    if ((rc = mesh ? mg_status_agree(rc) : rc) == MG_OK) rc = forward(&model, mesh, ids, T, logits);
    if (rc == MG_OK && mg_rank() == 0) rc = write_logits(o, logits, T, a.vocab);
    if (mesh) rc = mg_status_agree(rc);
    if (rc == MG_OK && mg_rank() == 0)
        printf("logits (%lld, %lld) of %s through %s: %s\n", (long long)T, (long long)a.vocab,
               o->text, o->path, o->logits);
    char msg[1024]; /* main.c prints it once; keep it across the frees */
    snprintf(msg, sizeof msg, "%s", mg_last_error());
    free(logits);
    free(ids);
    if (have_model) mg_model_free(&model);
    if (mesh) mg_mesh_free(mesh);
    return rc == MG_OK ? rc : mg_error(rc, "%s", msg);
}

int mg_cli_eval(int argc, char **argv) {
    eval_opts o;
    memset(&o, 0, sizeof o);
    mg_train_config cfg;
    mg_train_config_defaults(&cfg);
    o.cfg = &cfg;
    int rc = parse(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;
    rc = o.text ? eval_logits(&o) : eval_loss(&o);
    if (rc == MG_OK) return 0;
    return rc == MG_EINVAL || rc == MG_EMESH ? 2 : 1;
}
