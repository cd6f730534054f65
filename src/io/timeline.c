/* timeline.c: the timeline of --trace and mg_trace_open (see timeline.h).
 * Exports: mg_timeline_is_trace, mg_timeline_step_begin, mg_timeline_step_end,
 * mg_timeline_finish. */
#include "io/timeline.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/trace_kernels.h"
#include "status.h"
#include "trace.h"

int mg_timeline_is_trace(const char *path) {
    return mg_file_starts_with(path, MG_TIMELINE_MARK);
}

int mg_timeline_step_begin(mg_timeline *t, int64_t step, mg_comm *world) {
    if (!t->path[0] || t->recording || t->written || step != t->first) return MG_OK;
    int rc = mg_comm_barrier(world); /* the ranks start their clocks together */
    if (rc == MG_OK) rc = mg_trace_start();
    if (rc == MG_OK) rc = mg_backend_trace_kernels(true);
    t->recording = rc == MG_OK;
    return rc;
}

/* Rank 0: the file, from the ranks' parts (counts[r] bytes each, in order). */
static int write_file(const mg_timeline *t, const char *parts, const int64_t *counts, int n) {
    mg_tmp_file tmp;
    int rc = mg_tmp_create(&tmp, t->path);
    if (rc != MG_OK) return rc;
    FILE *f = fdopen(dup(tmp.fd), "w");
    if (!f) {
        mg_tmp_discard(&tmp);
        return mg_error(MG_EIO, "trace %s: %s", t->path, strerror(errno));
    }
    fprintf(f, MG_TIMELINE_MARK ",\"steps\":\"%lld:%lld\"},\"displayTimeUnit\":\"ms\","
               "\"traceEvents\":[\n", (long long)t->first, (long long)t->last);
    for (int r = 0; r < n; r++) {
        if (r) fputs(",\n", f);
        fwrite(parts, 1, (size_t)counts[r], f);
        parts += counts[r];
    }
    fputs("\n]}\n", f);
    int bad = ferror(f) != 0;
    bad |= fclose(f) != 0;
    if (bad) {
        mg_tmp_discard(&tmp);
        return mg_error(MG_EIO, "writing the trace %s failed: %s", t->path, strerror(errno));
    }
    return mg_tmp_commit(&tmp, t->path, "trace this program wrote", mg_timeline_is_trace);
}

/* Stops recording; gathers every rank's events to rank 0, which writes them. */
static int finish(mg_timeline *t, mg_comm *world) {
    mg_backend_trace_kernels(false);
    mg_trace_stop();
    t->recording = 0;
    t->written = 1;
    char *mine = NULL, *all = NULL;
    size_t len = 0;
    int rc = mg_trace_format(world->rank, &mine, &len);
    mg_trace_free();
    rc = mg_status_agree(rc);
    int64_t *counts = calloc((size_t)world->size, sizeof *counts);
    if (rc == MG_OK && !counts) rc = mg_error(MG_ENOMEM, "trace: out of memory");
    if ((rc = mg_status_agree(rc)) == MG_OK)
        rc = mg_comm_gather_bytes(world, mine, (int64_t)len, 0, &all, counts);
    free(mine);
    if (rc == MG_OK && world->rank == 0) {
        rc = write_file(t, all, counts, world->size);
        if (rc == MG_OK) {
            printf("trace: %s, steps %lld to %lld of %d rank%s (ui.perfetto.dev or "
                   "chrome://tracing)\n",
                   t->path, (long long)t->first, (long long)t->last, world->size,
                   world->size == 1 ? "" : "s");
            fflush(stdout);
        }
    }
    free(all);
    free(counts);
    return mg_status_agree(rc);
}

int mg_timeline_step_end(mg_timeline *t, int64_t step, mg_comm *world) {
    if (!t->recording || step != t->last) return MG_OK;
    return finish(t, world);
}

int mg_timeline_finish(mg_timeline *t, mg_comm *world) {
    return t->recording ? finish(t, world) : MG_OK;
}
