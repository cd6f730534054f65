/* train_metrics.c: the --metrics file of `meshgrad train` (JSON lines,
 * docs/DESIGN.md "Metrics"), written by rank 0: opened by the rule of every
 * output (io/files.h mg_output_open), each line flushed as written, and a
 * failed write turned into the run's error.
 * Exports: mg_train_metrics_open, mg_train_metrics_line,
 * mg_train_metrics_failed, mg_train_metrics_close (train.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/train.h"
#include "io/files.h"
#include "status.h"

/* A file this program could have written as --metrics: empty, or JSON lines
 * that start with a step. */
#define METRICS_MARK "{\"step\":"

int mg_train_metrics_open(trainer *tr) {
    mg_train_config *c = &tr->cfg;
    int st = MG_OK, fd = -1, stream = 0;
    if (c->metrics[0] && tr->rank == 0) {
        /* the one rule of outputs (io/files.h): a file this program wrote, or
         * stdout, stderr, a terminal or a pipe; appended to on a resume */
        st = mg_output_open(c->metrics, "metrics file this program wrote", METRICS_MARK,
                            c->resume[0] != 0, &fd, &stream);
        if (st == MG_OK && !(tr->metrics = fdopen(fd, c->resume[0] || stream ? "a" : "w"))) {
            st = mg_error(MG_EIO, "cannot write metrics file '%s': %s", c->metrics,
                          strerror(errno));
            close(fd);
        }
    }
    return mg_status_agree(st);
}

void mg_train_metrics_line(trainer *tr, const char *fmt, ...) {
    if (tr->rank != 0 || !tr->metrics || tr->metrics_errno) return;
    va_list ap;
    va_start(ap, fmt);
    errno = 0;
    int bad = vfprintf(tr->metrics, fmt, ap) < 0;
    va_end(ap);
    bad |= fflush(tr->metrics) != 0;
    if (bad) tr->metrics_errno = errno ? errno : EIO;
}

int mg_train_metrics_failed(trainer *tr, int64_t failed) {
    if (!failed) return MG_OK;
    return mg_error(MG_EIO, "cannot write metrics file '%s': %s", tr->cfg.metrics,
                    tr->rank == 0 ? strerror(tr->metrics_errno) : "(rank 0 says why)");
}

void mg_train_metrics_close(trainer *tr) {
    if (tr->metrics) fclose(tr->metrics);
    tr->metrics = NULL;
}
