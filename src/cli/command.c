/* command.c: tables of subcommands, shared by the program (main.c), `meshgrad
 * bench` (bench.c), `meshgrad ckpt` (ckpt.c) and `meshgrad data` (data.c): find
 * an entry by name, list the table, and run the one argv names.
 * Also the two errors of a command's getopt loop, the check of a command
 * that takes one PATH, and a look at one flag before getopt.
 * Exports mg_cli_command_find, mg_cli_command_list, mg_cli_dispatch,
 * mg_cli_bad_flag, mg_cli_no_arguments_left, mg_cli_one_path, mg_cli_flag_at
 * (cli.h). */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "meshgrad.h"
#include "status.h"

const mg_cli_command *mg_cli_command_find(const mg_cli_command *table, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(name, table[i].name) == 0) return &table[i];
    return NULL;
}

void mg_cli_command_list(FILE *out, const mg_cli_command *table, int n, int width) {
    for (int i = 0; i < n; i++) fprintf(out, "  %-*s %s\n", width, table[i].name, table[i].help);
}

int mg_cli_dispatch(const char *cmd, const char *usage, const mg_cli_command *table, int n,
                    int width, int argc, char **argv) {
    const mg_cli_command *sub = argc >= 2 ? mg_cli_command_find(table, n, argv[1]) : NULL;
    if (sub) return sub->run(argc - 1, argv + 1);
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        if (mg_rank() == 0) {
            printf("%s\n", usage);
            mg_cli_command_list(stdout, table, n, width);
        }
        return 0;
    }
    char names[256] = "";
    for (int i = 0; i < n; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                 i == 0 ? "" : i == n - 1 ? " or " : ", ", table[i].name);
    mg_error(MG_EINVAL, "%s needs a subcommand: %s (got %s)", cmd, names,
             argc >= 2 ? argv[1] : "nothing");
    return 2;
}

int mg_cli_bad_flag(const char *cmd, char **argv) {
    return mg_error(MG_EINVAL, "%s: unknown option or missing value '%s'", cmd, argv[optind - 1]);
}

int mg_cli_no_arguments_left(const char *cmd, int argc, char **argv) {
    if (optind >= argc) return MG_OK;
    return mg_error(MG_EINVAL, "%s: unexpected argument '%s'", cmd, argv[optind]);
}

int mg_cli_one_path(const char *cmd, int argc, char **argv, const char *usage) {
    if (argc == 2) return MG_OK;
    for (int i = 1; i < argc; i++) /* an option: it takes none */
        if (argv[i][0] == '-' && argv[i][1])
            return mg_error(MG_EINVAL, "%s: unknown option '%s' (%s)", cmd, argv[i], usage);
    if (argc > 2)
        return mg_error(MG_EINVAL, "%s: unexpected argument '%s' after PATH '%s' (%s)", cmd,
                        argv[2], argv[1], usage);
    return mg_error(MG_EINVAL, "%s", usage);
}

const char *mg_cli_flag_at(int argc, char **argv, int i, const char *flag) {
    size_t n = strlen(flag);
    if (strncmp(argv[i], flag, n) == 0 && argv[i][n] == '=') return argv[i] + n + 1;
    return strcmp(argv[i], flag) == 0 && i + 1 < argc ? argv[i + 1] : NULL;
}
