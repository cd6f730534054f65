/* cli.h: the meshgrad program's subcommands. Each takes the arguments after
 * its name (argv[0] is the subcommand name) and returns the process exit code:
 * 0 ok, 1 failure, 2 usage error. MPI is started (mg_init) before the call.
 * On failure a subcommand leaves the reason in mg_error() and does NOT print
 * "meshgrad: error: ..." itself: main.c prints mg_last_error() once (rank 0, or
 * the lowest rank holding a message). It may print its own usage text (rank 0). */
#ifndef MG_CLI_H
#define MG_CLI_H

#include <stddef.h>
#include <stdio.h>

#include "machine.h"

/* One entry of a table of subcommands (main.c's commands, bench.c's kinds). */
typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} mg_cli_command;
/* The entry named `name` in table[0..n), or NULL (src/cli/command.c). */
const mg_cli_command *mg_cli_command_find(const mg_cli_command *table, int n, const char *name);
/* "  NAME HELP", a line for each entry, the names padded to `width` (src/cli/command.c). */
void mg_cli_command_list(FILE *out, const mg_cli_command *table, int n, int width);
/* After getopt_long in `cmd` ("plan", "bench step", ...): the error for the flag it
 * did not know or that lacks its value, and MG_OK when no argument is left over (else
 * an error naming the first); both MG_EINVAL with "CMD: ..." (src/cli/command.c). */
int mg_cli_bad_flag(const char *cmd, char **argv);
int mg_cli_no_arguments_left(const char *cmd, int argc, char **argv);
/* A command of one PATH (argv[1]): MG_OK, or MG_EINVAL naming the option or the
 * argument past PATH, else (no PATH) saying `usage` (src/cli/command.c). */
int mg_cli_one_path(const char *cmd, int argc, char **argv, const char *usage);
/* `meshgrad CMD SUB [ARGS...]` (src/cli/command.c): runs the entry of table[0..n) named
 * argv[1] with (argc - 1, argv + 1) and returns its exit code. --help or -h: rank 0
 * prints the line `usage` and the table (mg_cli_command_list), 0. No name or another
 * one: MG_EINVAL "CMD needs a subcommand: A, B or C (got X)", 2. */
int mg_cli_dispatch(const char *cmd, const char *usage, const mg_cli_command *table, int n,
                    int width, int argc, char **argv);
/* The value argv[i] gives `flag` ("--model"): V of "--model=V", argv[i + 1]
 * after "--model", else NULL: a look at one flag before getopt reads them all
 * (src/cli/command.c). */
const char *mg_cli_flag_at(int argc, char **argv, int i, const char *flag);

int mg_cli_train(int argc, char **argv);      /* src/cli/train.c */
int mg_cli_ckpt(int argc, char **argv);       /* src/cli/ckpt.c */
int mg_cli_ckpt_export(int argc, char **argv); /* src/cli/ckpt_convert.c */
int mg_cli_ckpt_import(int argc, char **argv); /* src/cli/ckpt_convert.c */
int mg_cli_eval(int argc, char **argv);        /* src/cli/eval.c */
int mg_cli_data(int argc, char **argv);       /* src/cli/data.c */
int mg_cli_text2h5(int argc, char **argv);    /* src/cli/data_text.c */
int mg_cli_text_info(const char *path);       /* src/cli/data_text.c */
int mg_cli_bin2h5(int argc, char **argv);     /* src/cli/data_bin.c */
int mg_cli_bench(int argc, char **argv);        /* src/cli/bench.c: comm | linear | step | ops */
int mg_cli_bench_comm(int argc, char **argv);   /* src/cli/bench_comm.c */
int mg_cli_bench_linear(int argc, char **argv); /* src/cli/bench_ops.c */
int mg_cli_bench_ops(int argc, char **argv);    /* src/cli/bench_ops.c */
/* bench step: bench.c picks one of the MLP's (src/cli/bench_step.c), the GPT's
 * (--model gpt, src/cli/bench_gpt.c) and a pipeline's (pp in --parallel,
 * src/cli/bench_pp.c). */
int mg_cli_bench_step_mlp(int argc, char **argv);
int mg_cli_bench_step_gpt(int argc, char **argv);
int mg_cli_bench_step_pp(int argc, char **argv);
int mg_cli_generate(int argc, char **argv);     /* src/cli/generate.c */
int mg_cli_plan(int argc, char **argv);         /* src/cli/plan.c */
int mg_cli_plan_estimate(int argc, char **argv); /* src/cli/plan_estimate.c: plan --estimate */
int mg_cli_trace(int argc, char **argv);        /* src/cli/trace.c: analyze DIR */

/* src/cli/bench_nn.c: the network kernels' rows of `bench ops` (collective; rank 0
 * prints them and appends its JSON fields, starting with a comma, to json) */
int mg_cli_bench_nn(char *json, size_t len);

#endif
