/* main.c: the meshgrad program: `meshgrad [--help | --version] COMMAND [ARGS...]`.
 *
 * Parses the global flags (getopt_long), picks the subcommand (cli.h), starts MPI
 * for it (mg_init), runs it and reports its failure once: a subcommand returns
 * 0 ok, 1 failure or 2 usage error, leaving the reason in mg_last_error(); it does
 * not print "meshgrad: error:" itself. The ranks agree on the exit code, and the
 * lowest rank that holds a message prints it (rank 0 for errors every rank sees),
 * its control bytes escaped (text.h: a message may quote a file).
 * A usage error in the global flags or an unknown command exits 2 before MPI starts.
 * Before anything else it makes sure OpenBLAS runs the kernels it should
 * (backend/blas_core.h) and that malloc takes huge pages for the heap,
 * running the program again once with the variables set when not. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/blas_core.h"
#include "backend/device.h"
#include "cli/cli.h"
#include "context.h"
#include "dist/comm.h"
#include "meshgrad.h"
#include "status.h"
#include "text.h"

static const mg_cli_command commands[] = {
    {"train", mg_cli_train, "train a model described by a config file (--config FILE)"},
    {"ckpt", mg_cli_ckpt, "inspect a checkpoint; export and import other programs' models"},
    {"data", mg_cli_data, "make and inspect HDF5 data sets"},
    {"bench", mg_cli_bench, "measure collectives, kernels and training steps"},
    {"plan", mg_cli_plan, "plan a pipeline-parallel step: stages, timeline, step time, memory"},
    {"trace", mg_cli_trace, "analyze the flight recorder's dumps of a job (trace analyze DIR)"},
    {"generate", mg_cli_generate, "print text sampled from a GPT checkpoint (--resume CKPT)"},
    {"eval", mg_cli_eval, "a checkpoint's loss on a data set, or its logits of a text"},
};
enum { N_COMMANDS = sizeof commands / sizeof commands[0] };

/* How long a failed rank waits for the others to agree on the outcome before it
 * aborts the job (only when a subcommand broke the rule that errors are agreed,
 * so that a lone failure never leaves the program hanging). */
#ifndef MG_AGREE_SECONDS
#define MG_AGREE_SECONDS 60
#endif

static void usage(FILE *out) {
    fprintf(out, "usage: meshgrad [--help] [--version] COMMAND [ARGS...]\n\ncommands:\n");
    mg_cli_command_list(out, commands, N_COMMANDS, 8);
    fprintf(out,
            "\n`meshgrad COMMAND --help` lists a command's options. Run under MPI, one process\n"
            "per device, e.g.: mpirun -np 2 meshgrad train --config data/digits.conf\n");
}

#define HUGETLB "glibc.malloc.hugetlb"

/* The value of glibc.malloc.hugetlb in GLIBC_TUNABLES (up to a ':' or the
 * end), or NULL when it is not set there. */
static const char *hugetlb_value(void) {
    const char *t = getenv("GLIBC_TUNABLES"), *h = t ? strstr(t, HUGETLB "=") : NULL;
    return h ? h + strlen(HUGETLB "=") : NULL;
}

/* glibc's malloc madvises its heap and its mapped chunks for transparent
 * huge pages when GLIBC_TUNABLES holds glibc.malloc.hugetlb=1, read as a
 * process starts. The weights a generated token streams through then take a
 * TLB entry per 2 MiB instead of per 4 KiB (docs/PERFORMANCE.md, "The
 * Llama"). A user's own setting of it is kept. 1 when it set the variable. */
static int huge_pages_setenv(void) {
    const char *t = getenv("GLIBC_TUNABLES");
    if (hugetlb_value()) return 0;
    char v[4096];
    int n = snprintf(v, sizeof v, "%s%s%s=1", t ? t : "", t && *t ? ":" : "", HUGETLB);
    return n > 0 && n < (int)sizeof v && setenv("GLIBC_TUNABLES", v, 1) == 0;
}

/* The CPU backend names the OpenBLAS kernels that run and whether they are the
 * best this CPU has (blas_core.h); a poor pick meshgrad could not fix is also
 * said on stderr, as mg_init says it for the commands. */
static void version(void) {
    mg_blas_facts facts = mg_blas_facts_read();
    char blas[256], warning[512];
    mg_blas_core_describe(&facts, blas, sizeof blas);
    if (mg_blas_core_warning(&facts, warning, sizeof warning)) fprintf(stderr, "%s\n", warning);
    printf("meshgrad %s\n", PACKAGE_VERSION);
#ifdef MG_HAVE_CUDA
    char gpus[1024];
    mg_cuda_describe(gpus, sizeof gpus);
    printf("backends: cpu (OpenBLAS, %s), cuda\ncuda: %s\n", blas, gpus);
#else
    printf("backends: cpu (OpenBLAS, %s)\n", blas);
#endif
    printf("cpu bf16 GEMM (--dtype bf16): %s\n", mg_backend_cpu_bf16_gemm());
    /* what malloc read as this process started (huge_pages_setenv) */
    const char *h = hugetlb_value();
    int n = h ? (int)strcspn(h, ":") : 0;
    printf("heap: %s=%.*s%s\n", HUGETLB, n, h ? h : "unset",
           h && n == 1 && *h == '1' ? " (transparent huge pages)" : "");
}

/* A command's stdout is its product (train's is a log: it warns once and goes
 * on, train_report.c): output that could not be written (a full disk, stdout
 * closed) fails the command, which would otherwise exit 0 having printed
 * nothing. Returns rc, or 1 with the reason in mg_last_error(). */
static int check_stdout(const char *command, int rc) {
    if (strcmp(command, "train") == 0) return rc;
    errno = 0;
    int failed = fflush(stdout) != 0 || ferror(stdout);
    if (!failed || rc != 0) return rc;
    mg_error(MG_EIO, "%s: its output could not be written to stdout%s%s%s: give it a file or "
             "pipe that takes it", command, errno ? " (" : "", errno ? strerror(errno) : "",
             errno ? ")" : "");
    return 1;
}

/* Agrees on the exit code (the largest) and prints the error once. Returns the
 * agreed exit code. A rank that failed waits for the others only so long: if
 * some rank never arrives (it is stuck in a collective the failed rank left),
 * the failed rank prints its own message and aborts the job. A rank that
 * succeeded waits as long as the others take (under the collective watchdog). */
static int report(const char *command, int rc) {
    mg_comm *world = mg_comm_world();
    int rank = mg_rank();
    const char *msg = mg_last_error();
    int has_msg = rc != 0 && msg && msg[0];
    int64_t all[2] = {rc, has_msg ? -rank : -INT_MAX};
    int st = world ? mg_comm_agree_max(world, all, 2, rc == 0 ? -1 : MG_AGREE_SECONDS) : MG_ECOMM;
    char safe[1100]; /* a message may quote a file: its control bytes escaped (text.h) */
    mg_text_safe(has_msg ? msg : "failed", safe, sizeof safe);
    if (st != MG_OK) {
        fprintf(stderr, "meshgrad: error: rank %d: %s (the other ranks did not finish '%s'; aborting)\n",
                rank, safe, command);
        mg_comm_abort(world, rc ? rc : 1);
    }
    int worst = (int)all[0], printer = (int)-all[1];
    if (worst != 0) {
        if (printer == rank && rank == 0)
            fprintf(stderr, "meshgrad: error: %s\n", safe);
        else if (printer == rank) // an error only this rank saw
            fprintf(stderr, "meshgrad: error: rank %d: %s\n", rank, safe);
        else if (printer == INT_MAX && rank == 0 && worst == 1)
            fprintf(stderr, "meshgrad: error: %s failed\n", command);
    }
    return worst;
}

/* --help and --version, before MPI: 1 with a message when stdout did not take them. */
static int stdout_failed(void) {
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout)) return 0;
    fprintf(stderr, "meshgrad: error: the output could not be written to stdout%s%s%s\n",
            errno ? " (" : "", errno ? strerror(errno) : "", errno ? ")" : "");
    return 1;
}


int main(int argc, char **argv) {
    /* OpenBLAS picked its kernels as it loaded (where the pick is worse than
     * this CPU's best, or than MG_CPU_ISA asks, it must be set right) and
     * malloc read its tunables: run again, once, with the variables set */
    int again = mg_blas_core_setenv();
    again |= huge_pages_setenv();
    if (again) execv("/proc/self/exe", argv);
    static const struct option options[] = {
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    opterr = 0; // our own message, which names the program as "meshgrad"
    // '+': stop at the command name; what follows belongs to the command
    while ((opt = getopt_long(argc, argv, "+hV", options, NULL)) != -1) {
        switch (opt) {
        case 'h': usage(stdout); return stdout_failed();
        case 'V': version(); return stdout_failed();
        default:
            fprintf(stderr, "meshgrad: error: unknown option '%s'\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "meshgrad: error: no command given: give one of the commands below\n");
        usage(stderr);
        return 2;
    }
    const mg_cli_command *cmd = mg_cli_command_find(commands, N_COMMANDS, argv[optind]);
    if (!cmd) {
        fprintf(stderr, "meshgrad: error: unknown command '%s': give one of the commands below\n",
                argv[optind]);
        usage(stderr);
        return 2;
    }

    int first = optind;
    if (mg_init(&argc, &argv) != MG_OK) {
        char safe[1100];
        fprintf(stderr, "meshgrad: error: %s\n", mg_text_safe(mg_last_error(), safe, sizeof safe));
        return 1;
    }
    mg_clear_error();
    optind = 0; // the command parses its own argv from scratch with getopt
    int rc = cmd->run(argc - first, argv + first);
    rc = report(cmd->name, check_stdout(cmd->name, rc));
    mg_finalize();
    return rc;
}
