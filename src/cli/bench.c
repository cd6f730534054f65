/* bench.c: `meshgrad bench KIND [ARGS...]`: picks one benchmark and runs it.
 * Exports mg_cli_bench (cli.h). Kinds: comm (collective bandwidth, bench_comm.c),
 * linear and ops (compute and dispatch, bench_ops.c), step (a training step:
 * the MLP's, bench_step.c; the GPT's, bench_gpt.c; a pipeline's, bench_pp.c). */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "meshgrad.h"
#include "nn/plan.h"
#include "status.h"

/* --parallel names pp: the pipeline's benchmark (bench_pp.c) takes the flags. */
static int wants_pipeline(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *v = mg_cli_flag_at(argc, argv, i, "--parallel");
        mg_plan plan;
        if (v && mg_plan_parse(v, &plan) == MG_OK && mg_plan_pp_dim(&plan) >= 0) return 1;
    }
    return 0;
}

/* `bench step`: the GPT's or the Llama's with --model gpt or llama (with pp
 * or not; the first --model decides, and the MLP's refuses any other), a
 * pipeline's with pp in --parallel, else the MLP's (which refuse --recompute:
 * no blocks). */
static int step(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *model = mg_cli_flag_at(argc, argv, i, "--model");
        if (model && (strcmp(model, "gpt") == 0 || strcmp(model, "llama") == 0))
            return mg_cli_bench_step_gpt(argc, argv);
        if (model) return mg_cli_bench_step_mlp(argc, argv);
    }
    for (int i = 1; i < argc; i++) /* the MLP's steps: no blocks */
        if (mg_cli_flag_at(argc, argv, i, "--recompute")) {
            mg_error(MG_EINVAL, "bench step: --recompute applies to the GPT's and the Llama's "
                     "steps (--model gpt or llama): the MLP has no blocks to recompute");
            return 2;
        }
    if (wants_pipeline(argc, argv)) return mg_cli_bench_step_pp(argc, argv);
    return mg_cli_bench_step_mlp(argc, argv);
}

static const mg_cli_command kinds[] = {
    {"comm", mg_cli_bench_comm, "collective bandwidth on each mesh dimension, by message size"},
    {"linear", mg_cli_bench_linear, "mg_linear forward + backward GFLOP/s next to raw cblas_sgemm"},
    {"step", step, "a training step on any mesh and plan: an MLP (ReLU, MSE, SGD), "
                                "the GPT or the Llama (--model gpt|llama); pipelines with pp in "
                                "--parallel"},
    {"ops", mg_cli_bench_ops, "per-op dispatch overhead next to MPI latency; attention, layer "
                              "norm and softmax kernels next to sgemm and a copy"},
};
enum { N_KINDS = sizeof kinds / sizeof kinds[0] };

static void usage(FILE *out) {
    if (mg_rank() != 0) return;
    fprintf(out, "usage: meshgrad bench KIND [ARGS...]\n\nkinds:\n");
    mg_cli_command_list(out, kinds, N_KINDS, 6);
    fprintf(out, "\n`meshgrad bench KIND --help` lists a benchmark's options.\n");
}

/* "linear, step, ..." into names (len bytes); returns names */
static const char *kind_names(char *names, size_t len) {
    names[0] = '\0';
    for (int i = 0; i < N_KINDS; i++) {
        if (i) strncat(names, ", ", len - strlen(names) - 1);
        strncat(names, kinds[i].name, len - strlen(names) - 1);
    }
    return names;
}

int mg_cli_bench(int argc, char **argv) {
    char names[256];
    if (argc < 2) {
        usage(stderr);
        mg_error(MG_EINVAL, "bench needs a benchmark kind (one of: %s)",
                 kind_names(names, sizeof names));
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    const mg_cli_command *kind = mg_cli_command_find(kinds, N_KINDS, argv[1]);
    if (kind) {
        optind = 0; // the benchmark parses its own argv from scratch
        return kind->run(argc - 1, argv + 1);
    }
    usage(stderr);
    mg_error(MG_EINVAL, "unknown benchmark kind '%s' (one of: %s)", argv[1],
             kind_names(names, sizeof names));
    return 2;
}
