/* ckpt_convert.c: `meshgrad ckpt export` and `meshgrad ckpt import`: a
 * meshgrad checkpoint to and from other programs' model files (convert.h):
 *
 *   ckpt export --format llama2c|safetensors [--overwrite] IN OUT
 *   ckpt import --format llama2c|safetensors [--config FILE] [--overwrite] IN OUT
 *
 * Export reads the model from IN's attributes (nn/arch.h) and its parameters
 * as a load does (checksums, finite values; every rank takes the whole of
 * each), and rank 0 writes OUT (and config.json beside a safetensors file).
 * Import reads IN on every rank (each checks every size before it reads a
 * value, so all refuse a file alike) and saves a checkpoint of parameters
 * only: the model's attributes, step 0, optimizer "none", which `train
 * --resume` (a fresh optimizer), `eval` and `generate` load on any mesh
 * (nn/train_state.h). Every layout is a permutation, so an export then an
 * import gives the parameters' bits back.
 *
 * Outputs never replace anything unasked: an existing OUT (or config.json)
 * is refused unless --overwrite is given, and even then only a file of the
 * kind the command writes (a safetensors file or config.json meshgrad wrote,
 * a llama2.c model file, a meshgrad checkpoint) is replaced, atomically
 * (io/files.h). Exports mg_cli_ckpt_export, mg_cli_ckpt_import (cli.h). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/convert.h"
#include "dist/comm.h"
#include "dist/dtensor.h"
#include "dist/mesh.h"
#include "io/checkpoint.h"
#include "io/files.h"
#include "io/llama2c.h"
#include "io/safetensors.h"
#include "meshgrad.h"
#include "nn/hf.h"
#include "status.h"

#define MAX_ATTRS 512

typedef struct {
    int export; /* 1 export, 0 import */
    int llama2c; /* the format: llama2c, else safetensors */
    int overwrite;
    const char *config; /* import: config.json (NULL: beside IN) */
    char in[MG_PATH_MAX], out[MG_PATH_MAX];
} convert_opts;

static void usage(FILE *out, int export) {
    if (export)
        fputs("usage: meshgrad ckpt export --format llama2c|safetensors [--overwrite] IN OUT\n"
              "\n"
              "Writes the model of checkpoint IN (a file, or a directory: its newest) for other\n"
              "programs:\n"
              "  llama2c      llama2.c's version-0 file, which its run.c reads (a llama only)\n"
              "  safetensors  Hugging Face's names and layouts (GPT2LMHeadModel,\n"
              "               LlamaForCausalLM), F32, with config.json beside OUT\n"
              "  --overwrite  replace an OUT (and config.json) of that kind that exists\n",
              out);
    else
        fputs("usage: meshgrad ckpt import --format llama2c|safetensors [--config FILE]\n"
              "                            [--overwrite] IN OUT\n"
              "\n"
              "Makes the meshgrad checkpoint OUT (parameters only, step 0) of the model in IN:\n"
              "  llama2c      a llama2.c version-0 file (export.py's legacy_export)\n"
              "  safetensors  GPT2LMHeadModel or LlamaForCausalLM under Hugging Face's names,\n"
              "               F32 or BF16; its config.json beside IN, or --config FILE\n"
              "  --overwrite  replace an OUT that exists (a meshgrad checkpoint only)\n"
              "OUT resumes with `meshgrad train --resume OUT` (a fresh optimizer), and\n"
              "`meshgrad eval` and `meshgrad generate` take it, on any mesh.\n",
              out);
}

/* 0, 1 (--help shown) or 2 (a usage error). */
static int parse(int argc, char **argv, convert_opts *o) {
    static const struct option opts[] = {{"format", 1, 0, 'f'}, {"config", 1, 0, 'c'},
                                         {"overwrite", 0, 0, 'o'}, {"help", 0, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *cmd = o->export ? "ckpt export" : "ckpt import", *format = NULL;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'f': format = optarg; break;
        case 'c': o->config = optarg; break;
        case 'o': o->overwrite = 1; break;
        case 'h':
            if (mg_rank() == 0) usage(stdout, o->export);
            return 1;
        default: mg_cli_bad_flag(cmd, argv); return 2;
        }
    }
    if (!format) {
        mg_error(MG_EINVAL, "%s: no --format: give llama2c or safetensors", cmd);
        return 2;
    }
    if (strcmp(format, "llama2c") != 0 && strcmp(format, "safetensors") != 0) {
        mg_error(MG_EINVAL, "%s: --format %s: give llama2c or safetensors", cmd, format);
        return 2;
    }
    o->llama2c = strcmp(format, "llama2c") == 0;
    if (o->config && (o->export || o->llama2c)) {
        mg_error(MG_EINVAL, "%s: --config names the config.json of a safetensors file to import",
                 cmd);
        return 2;
    }
    if (argc - optind != 2) {
        mg_error(MG_EINVAL, "%s: give IN and OUT (%d path%s given)", cmd, argc - optind,
                 argc - optind == 1 ? "" : "s");
        return 2;
    }
    if (mg_path_check(argv[optind], "IN", 0) != MG_OK ||
        mg_path_check(argv[optind + 1], "OUT", MG_TMP_SUFFIX_MAX + 16) != MG_OK)
        return 2;
    snprintf(o->in, sizeof o->in, "%s", argv[optind]);
    snprintf(o->out, sizeof o->out, "%s", argv[optind + 1]);
    return 0;
}

/* Rank 0: `path` may be written: not the input, and absent, or (with
 * --overwrite) a regular file that accept() takes. */
static int check_target(const convert_opts *o, const char *path, const char *kind,
                        int (*accept)(const char *)) {
    int exists = 0;
    if (mg_path_same_file(path, o->in))
        return mg_error(MG_EINVAL, "%s is the input IN: give OUT another path", path);
    int rc = mg_file_replaceable(path, kind, accept, &exists);
    if (rc == MG_OK && exists && !o->overwrite)
        return mg_error(MG_EIO, "will not replace %s: it exists; give --overwrite to replace it "
                        "(only a %s is replaced)", path, kind);
    struct stat sb;
    char dir[MG_PATH_MAX];
    mg_path_dir(path, dir, sizeof dir);
    if (rc == MG_OK && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)))
        rc = mg_error(MG_EIO, "cannot write %s: %s is not a directory", path, dir);
    return rc;
}

static int checkpoint_kind(const char *path) { return mg_checkpoint_is_one(path); }

/* Rank 0: every output of the command may be written. */
static int check_targets(const convert_opts *o) {
    if (!o->export) return check_target(o, o->out, "meshgrad checkpoint", checkpoint_kind);
    if (o->llama2c) return check_target(o, o->out, "llama2.c model file", mg_l2c_is_one);
    char config[MG_PATH_MAX];
    mg_convert_hf_targets(o->out, config, sizeof config);
    const char *base = strrchr(o->out, '/') ? strrchr(o->out, '/') + 1 : o->out;
    int rc = strcmp(base, "config.json") == 0
                 ? mg_error(MG_EINVAL, "OUT %s is where its config.json goes: name it otherwise "
                            "(model.safetensors)", o->out)
                 : check_target(o, o->out, "safetensors file meshgrad wrote", mg_st_is_ours);
    return rc == MG_OK ? check_target(o, config, "config.json meshgrad wrote",
                                      mg_hf_config_is_ours)
                       : rc;
}

/* Collective. The parameters of checkpoint `path` into m (the model of its
 * attributes): each a Replicate tensor on a 1-D mesh of all ranks, loaded
 * and checked as any load is. */
static int load_checkpoint(const char *path, const mg_arch *a, mg_mesh *mesh, mg_host_model *m) {
    int rc = mg_host_model_alloc(m, a), n = m->n;
    mg_ckpt_entry *e = calloc((size_t)n + 1, sizeof *e);
    char (*names)[MG_PARAM_NAME_MAX + 8] = calloc((size_t)n + 1, sizeof *names);
    if (rc == MG_OK && (!e || !names)) rc = mg_error(MG_ENOMEM, "ckpt export: out of memory");
    rc = mg_status_agree(rc);
    mg_placement rep = MG_REPLICATE;
    for (int k = 0; rc == MG_OK && k < n; k++) {
        mg_arch_param_desc d;
        mg_arch_param(a, k, &d);
        snprintf(names[k], sizeof names[k], "params/%s", d.name);
        mg_spec s;
        rc = mg_spec_make(&s, mesh, &rep, 1, d.ndim, d.shape, "ckpt export");
        e[k].name = names[k];
        if (rc == MG_OK && !(e[k].tensor = mg_dtensor_zeros(&s, NULL))) rc = mg_last_code();
    }
    if (rc == MG_OK) rc = mg_checkpoint_load(path, e, n, NULL, 0, NULL);
    for (int k = 0; e && k < n; k++) {
        if (rc == MG_OK)
            memcpy(m->p[k], e[k].tensor->local->data, sizeof(float) * (size_t)e[k].tensor->local->numel);
        if (e[k].tensor) mg_dtensor_free(e[k].tensor);
    }
    free(e);
    free(names);
    return rc;
}

/* Collective. The checkpoint OUT of m's parameters and attributes. */
static int save_checkpoint(const convert_opts *o, const mg_host_model *m, mg_mesh *mesh) {
    int n = m->n, na = 0;
    mg_ckpt_entry *e = calloc((size_t)n + 1, sizeof *e);
    char (*names)[MG_PARAM_NAME_MAX + 8] = calloc((size_t)n + 1, sizeof *names);
    mg_ckpt_attr *attrs = calloc(32, sizeof *attrs);
    int rc = mg_status_agree(e && names && attrs ? MG_OK
                                                 : mg_error(MG_ENOMEM, "ckpt import: out of memory"));
    mg_placement rep = MG_REPLICATE;
    for (int k = 0; rc == MG_OK && k < n; k++) {
        mg_arch_param_desc d;
        mg_arch_param(&m->arch, k, &d);
        snprintf(names[k], sizeof names[k], "params/%s", d.name);
        mg_tensor *t = mg_tensor_from_data(d.ndim, d.shape, m->p[k]);
        e[k].name = names[k];
        e[k].tensor = t ? mg_distribute(mesh, t, &rep, 1) : NULL;
        mg_tensor_free(t);
        if (!e[k].tensor) rc = mg_last_code() ? mg_last_code() : MG_ENOMEM;
    }
    if (rc == MG_OK) {
        const char *fixed[][2] = {{"step", "0"},
                                  {"optimizer", "none"},
                                  {"optimizer.state", "none"},
                                  {"optimizer.step", "0"},
                                  {"import.format", o->llama2c ? "llama2c" : "safetensors"},
                                  {"import.source", o->in},
                                  {"meshgrad.version", mg_version()}};
        for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++, na++) {
            snprintf(attrs[na].key, sizeof attrs[na].key, "%s", fixed[i][0]);
            snprintf(attrs[na].value, sizeof attrs[na].value, "%s", fixed[i][1]);
        }
        na += mg_arch_attrs(&m->arch, attrs + na, 32 - na);
        rc = mg_checkpoint_save(o->out, e, n, attrs, na);
    }
    for (int k = 0; e && k < n; k++)
        if (e[k].tensor) mg_dtensor_free(e[k].tensor);
    free(e);
    free(names);
    free(attrs);
    return rc;
}

/* Collective: IN resolved on rank 0 (a directory: its newest checkpoint), then
 * its model. */
static int read_model(convert_opts *o, mg_mesh *mesh, mg_arch *a) {
    int rc = MG_OK;
    char given[MG_PATH_MAX];
    snprintf(given, sizeof given, "%s", o->in);
    if (mg_rank() == 0) rc = mg_checkpoint_resolve(given, o->in, sizeof o->in);
    if ((rc = mg_status_agree(rc)) != MG_OK) return rc;
    if ((rc = mg_comm_broadcast_bytes(mesh->world, o->in, sizeof o->in, 0)) != MG_OK) return rc;
    mg_ckpt_attr *attrs = calloc(MAX_ATTRS, sizeof *attrs);
    int n = 0;
    rc = attrs ? mg_checkpoint_read_attrs(o->in, attrs, MAX_ATTRS, &n)
               : mg_error(MG_ENOMEM, "ckpt export: out of memory");
    if (rc == MG_OK) rc = mg_arch_from_attrs(a, attrs, n, o->in);
    free(attrs);
    if ((rc = mg_status_agree(rc)) != MG_OK) return rc;
    return mg_arch_check_file(a, o->in); /* before a model of that size is made */
}

static int run_export(convert_opts *o, mg_mesh *mesh) {
    mg_arch a;
    mg_host_model m = {0};
    int rc = read_model(o, mesh, &a);
    if (rc == MG_OK && o->llama2c) rc = mg_convert_l2c_check(&a, o->in);
    if (rc == MG_OK && mg_rank() == 0) rc = check_targets(o);
    if ((rc = mg_status_agree(rc)) == MG_OK) rc = load_checkpoint(o->in, &a, mesh, &m);
    if (rc == MG_OK && mg_rank() == 0)
        rc = o->llama2c ? mg_convert_l2c_write(&m, o->out) : mg_convert_hf_write(&m, o->out);
    rc = mg_status_agree(rc);
    if (rc == MG_OK && mg_rank() == 0) {
        char model[256], config[MG_PATH_MAX];
        mg_arch_describe(&a, model, sizeof model);
        mg_convert_hf_targets(o->out, config, sizeof config);
        printf("exported %s (%s; %lld parameters) to %s%s%s\n", o->in, model,
               (long long)mg_arch_numel(&a), o->out, o->llama2c ? "" : " and ",
               o->llama2c ? "" : config);
    }
    mg_host_model_free(&m);
    return rc;
}

static int run_import(convert_opts *o, mg_mesh *mesh) {
    mg_host_model m = {0};
    int rc = o->llama2c ? mg_convert_l2c_read(&m, o->in) : mg_convert_hf_read(&m, o->in, o->config);
    if ((rc = mg_status_agree(rc)) == MG_OK && mg_rank() == 0) rc = check_targets(o);
    if ((rc = mg_status_agree(rc)) == MG_OK) rc = save_checkpoint(o, &m, mesh);
    if (rc == MG_OK && mg_rank() == 0) {
        char model[256];
        mg_arch_describe(&m.arch, model, sizeof model);
        printf("imported %s (%s; %lld parameters) to %s: parameters only, step 0\n", o->in, model,
               (long long)mg_arch_numel(&m.arch), o->out);
    }
    mg_host_model_free(&m);
    return rc;
}

static int convert(int argc, char **argv, int export) {
    convert_opts o = {.export = export};
    int code = parse(argc, argv, &o);
    if (code) return code == 1 ? 0 : code;
    int size = mg_world_size();
    mg_mesh *mesh = mg_mesh_new(1, &size);
    if (!mesh) return 1;
    int rc = export ? run_export(&o, mesh) : run_import(&o, mesh);
    char msg[1024]; /* main.c prints it once; keep it across the frees */
    snprintf(msg, sizeof msg, "%s", mg_last_error());
    mg_mesh_free(mesh);
    if (rc == MG_OK) return 0;
    mg_error(rc, "%s", msg);
    return rc == MG_EINVAL ? 2 : 1;
}

int mg_cli_ckpt_export(int argc, char **argv) { return convert(argc, argv, 1); }
int mg_cli_ckpt_import(int argc, char **argv) { return convert(argc, argv, 0); }
