/* train_metrics.c: the --metrics file of `meshgrad train` (JSON lines,
 * docs/DESIGN.md "Metrics"), written by rank 0: where it may be opened, each line
 * flushed as written, and a failed write turned into the run's error.
 * Exports: mg_train_metrics_open, mg_train_metrics_line,
 * mg_train_metrics_failed, mg_train_metrics_close (train.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/train.h"
#include "io/files.h"
#include "status.h"

/* A file this program could have written as --metrics: empty, or JSON lines
 * that start with a step. */
#define METRICS_MARK "{\"step\":"
static int is_metrics(const char *path) {
    struct stat sb;
    return (stat(path, &sb) == 0 && sb.st_size == 0) || mg_file_starts_with(path, METRICS_MARK);
}

/* A file opened without truncating it: MG_OK when it is a regular file,
 * empty or one this program wrote, checked through `fd` itself (the check by
 * name before the open may have seen another file: one put at the path in
 * between must not be truncated or appended to). A file this process may not
 * read (fd write-only) passes only when empty. */
static int check_opened(int fd, const char *path, int readable) {
    struct stat sb;
    char head[sizeof METRICS_MARK - 1];
    if (fstat(fd, &sb) != 0)
        return mg_error(MG_EIO, "cannot write metrics file '%s': %s", path, strerror(errno));
    if (S_ISREG(sb.st_mode) && sb.st_size > 0 && !readable)
        return mg_error(MG_EIO, "will not replace %s: it cannot be read to tell whether it is a "
                        "metrics file this program wrote: give another path", path);
    if (!S_ISREG(sb.st_mode) ||
        (sb.st_size > 0 && (pread(fd, head, sizeof head, 0) != (ssize_t)sizeof head ||
                            memcmp(head, METRICS_MARK, sizeof head) != 0)))
        return mg_error(MG_EIO, "will not replace %s: it is not a metrics file this program "
                        "wrote (another file was put there as it was opened): give another path",
                        path);
    return MG_OK;
}

int mg_train_metrics_open(trainer *tr) {
    mg_train_config *c = &tr->cfg;
    int st = MG_OK, exists = 0, stream = 0;
    struct stat sb;
    if (c->metrics[0] && tr->rank == 0) {
        stream = stat(c->metrics, &sb) == 0 && (S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode));
        if (!stream)
            st = mg_file_replaceable(c->metrics, "metrics file this program wrote", is_metrics,
                                     &exists);
    }
    if (st == MG_OK && c->metrics[0] && tr->rank == 0) {
        /* a stream is appended to; a file is opened as it is, checked through
         * the descriptor (as the stream is), then emptied (appended to when
         * resuming) */
        int how = O_CREAT | O_NOFOLLOW | O_NONBLOCK, readable = 1;
        int fd = stream ? open(c->metrics, O_WRONLY | O_APPEND | O_CLOEXEC)
                        : open(c->metrics, O_RDWR | O_CLOEXEC | how, 0644);
        if (fd < 0 && !stream && errno == EACCES) { /* may write it, not read it */
            readable = 0;
            fd = open(c->metrics, O_WRONLY | O_CLOEXEC | how, 0644);
        }
        if (fd >= 0 && stream && (fstat(fd, &sb) != 0 || !(S_ISCHR(sb.st_mode) ||
                                                           S_ISFIFO(sb.st_mode))))
            st = mg_error(MG_EIO, "will not write %s: it was a stream (a device or a pipe) as "
                          "checked and is not one as opened: give another path", c->metrics);
        else if (fd >= 0 && !stream) {
            st = check_opened(fd, c->metrics, readable);
            int flags = fcntl(fd, F_GETFL);
            if (st == MG_OK && (flags < 0 || fcntl(fd, F_SETFL, (flags & ~O_NONBLOCK) |
                                                   (c->resume[0] ? O_APPEND : 0)) != 0 ||
                                (!c->resume[0] && ftruncate(fd, 0) != 0)))
                st = mg_error(MG_EIO, "cannot write metrics file '%s': %s", c->metrics,
                              strerror(errno));
        }
        if (st == MG_OK && (fd < 0 || !(tr->metrics = fdopen(fd, c->resume[0] ? "a" : "w"))))
            st = mg_error(MG_EIO, "cannot write metrics file '%s': %s", c->metrics,
                          strerror(errno));
        if (st != MG_OK && fd >= 0) close(fd);
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
