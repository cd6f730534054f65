/* machine.c: what the library asks of this machine: a monotonic clock, and
 * how much memory the process may use (the smaller of the machine's and its
 * cgroup's limit, a container's), to refuse a run that cannot fit before it
 * fills the memory. Exports mg_clock, mg_machine_memory_bytes,
 * mg_machine_check_memory (machine.h). */
#include "machine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "context.h"
#include "status.h"

double mg_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The number in file `dir`/`name` (0 when there is none: "max", missing). */
static double limit_in(const char *dir, const char *name) {
    char path[4300], text[64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    int ok = f && fgets(text, sizeof text, f);
    if (f) fclose(f);
    char *end;
    double v = ok ? strtod(text, &end) : 0;
    return ok && end != text && v > 0 ? v : 0;
}

/* The smallest memory limit of this process's cgroup and those above it
 * (cgroup v2 memory.max, v1 memory.limit_in_bytes; a container's limit);
 * 0 when none is set. */
static double cgroup_limit(void) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[4096];
    double least = 0;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        const char *root, *file, *rel;
        if (strncmp(line, "0::", 3) == 0)
            root = "/sys/fs/cgroup", file = "memory.max", rel = line + 3;
        else if (strstr(line, ":memory:"))
            root = "/sys/fs/cgroup/memory", file = "memory.limit_in_bytes",
            rel = strstr(line, ":memory:") + 8;
        else
            continue;
        char dir[4200];
        snprintf(dir, sizeof dir, "%s%s", root, rel);
        for (;;) { /* this cgroup, then each one above it */
            double v = limit_in(dir, file);
            if (v > 0 && (least == 0 || v < least)) least = v;
            char *slash = strrchr(dir, '/');
            if (!slash || (size_t)(slash - dir) < strlen(root)) break;
            *slash = '\0';
        }
    }
    if (f) fclose(f);
    return least;
}

double mg_machine_memory_bytes(void) {
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    double have = pages > 0 && size > 0 ? (double)pages * (double)size : 0, limit = cgroup_limit();
    return limit > 0 && (have == 0 || limit < have) ? limit : have;
}

int mg_machine_check_memory(const char *what, double rank_bytes, const char *fix) {
    double have = mg_machine_memory_bytes();
    int on_node = mg_ctx()->node_ranks > 0 ? mg_ctx()->node_ranks : 1;
    if (!(have > 0) || rank_bytes * on_node <= have) return MG_OK;
    const double G = 1073741824.0;
    return mg_error(MG_ENOMEM, "%s needs at least %.1f GiB a rank, %.1f GiB for this machine's %d "
                    "rank%s, more than its %.1f GiB of memory: %s", what, rank_bytes / G,
                    rank_bytes * on_node / G, on_node, on_node == 1 ? "" : "s", have / G, fix);
}
