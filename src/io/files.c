/* files.c: paths and temporary files that never destroy anything (see
 * files.h). Exports mg_path_check, mg_path_dir, mg_path_same_file,
 * mg_file_replaceable, mg_file_starts_with, mg_file_open_read,
 * mg_file_write_all, mg_file_write_f32le, mg_output_check,
 * mg_output_open, mg_cleanup_add, mg_cleanup_drop, mg_cleanup_install,
 * mg_tmp_create, mg_tmp_reserve, mg_tmp_intact, mg_tmp_commit,
 * mg_tmp_discard, mg_tmp_clean_stale. */
#include "io/files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "status.h"
#include "text.h"

#ifndef PIPEFS_MAGIC
#define PIPEFS_MAGIC 0x50495045 /* linux/magic.h */
#endif

int mg_path_check(const char *path, const char *what, size_t reserve) {
    if (!path || !path[0]) return mg_error(MG_EINVAL, "%s: give a path", what);
    size_t n = strlen(path);
    if (n + reserve >= MG_PATH_MAX)
        return mg_error(MG_EINVAL, "%s path is %zu characters long; meshgrad takes paths of at "
                        "most %zu characters here: use a shorter path", what, n,
                        (size_t)MG_PATH_MAX - 1 - reserve);
    return MG_OK;
}

void mg_path_dir(const char *path, char *dir, size_t len) {
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, len, ".");
    else if (slash == path)
        snprintf(dir, len, "/");
    else
        snprintf(dir, len, "%.*s", (int)(slash - path), path);
}

int mg_path_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (!a || !b || !a[0] || !b[0] || stat(a, &sa) != 0 || stat(b, &sb) != 0) return 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* What a file that is not a regular file is, for a message. */
static const char *kind_of(mode_t mode) {
    return S_ISLNK(mode)                    ? "a symbolic link"
           : S_ISDIR(mode)                  ? "a directory"
           : S_ISCHR(mode) || S_ISBLK(mode) ? "a device"
           : S_ISFIFO(mode)                 ? "a FIFO (a named pipe)"
           : S_ISSOCK(mode)                 ? "a socket"
                                            : "not a regular file";
}

static int not_of_kind(const char *path, const char *kind) {
    return mg_error(MG_EIO, "will not replace %s: it is not a %s (a save replaces only a file it "
                    "could have written): give another path", path, kind);
}

int mg_file_replaceable(const char *path, const char *kind, int (*accept)(const char *path),
                        int *exists) {
    struct stat st;
    *exists = 0;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return MG_OK;
        return mg_error(MG_EIO, "cannot write %s: %s", path, strerror(errno));
    }
    *exists = 1;
    if (!S_ISREG(st.st_mode))
        return mg_error(MG_EIO, "will not replace %s: it is %s (a save replaces only a %s): give "
                        "another path", path, kind_of(st.st_mode), kind);
    if (accept && !accept(path)) return not_of_kind(path, kind);
    return MG_OK;
}

int mg_file_starts_with(const char *path, const char *mark) {
    /* a regular file only: a FIFO or device put at the path is not opened to wait or act */
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return 0;
    struct stat sb;
    char head[256];
    size_t want = strlen(mark) < sizeof head ? strlen(mark) : sizeof head;
    ssize_t n = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) ? pread(fd, head, want, 0) : -1;
    close(fd);
    return n == (ssize_t)want && memcmp(head, mark, want) == 0;
}

int mg_file_open_read(const char *path, const char *what, int *fd_out) {
    *fd_out = -1;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return mg_error(MG_EIO, "cannot open %s %s: %s", what, path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int err = errno;
        close(fd);
        return mg_error(MG_EIO, "cannot open %s %s: %s", what, path, strerror(err));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        if (S_ISDIR(sb.st_mode))
            return mg_error(MG_EIO, "cannot open %s %s: it is a directory", what, path);
        return mg_error(MG_EIO, "cannot open %s %s: it is %s, not a regular file, and is not "
                        "read (it may block or never end): give a file", what, path,
                        kind_of(sb.st_mode));
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        int err = errno;
        close(fd);
        return mg_error(MG_EIO, "cannot open %s %s: %s", what, path, strerror(err));
    }
    *fd_out = fd;
    return MG_OK;
}

/* ---- outputs: files, and the streams a log may go to ------------------------- */

int mg_file_write_all(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w, len -= (size_t)w;
    }
    return 0;
}

int mg_file_write_f32le(int fd, const float *x, int64_t n) {
    unsigned char block[4096];
    for (int64_t i = 0; i < n;) {
        size_t k = 0;
        for (; k + 4 <= sizeof block && i < n; i++, k += 4) {
            uint32_t bits;
            memcpy(&bits, &x[i], 4);
            for (int b = 0; b < 4; b++) block[k + (size_t)b] = (unsigned char)(bits >> (8 * b));
        }
        if (mg_file_write_all(fd, block, k) != 0) return -1;
    }
    return 0;
}

/* 1 (stdout) or 2 (stderr) when sb is the file this process writes there, else 0. */
static int std_stream(const struct stat *sb) {
    for (int fd = 1; fd <= 2; fd++) {
        struct stat o;
        if (fstat(fd, &o) == 0 && o.st_dev == sb->st_dev && o.st_ino == sb->st_ino &&
            (o.st_mode & S_IFMT) == (sb->st_mode & S_IFMT) &&
            (!S_ISCHR(o.st_mode) || o.st_rdev == sb->st_rdev))
            return fd;
    }
    return 0;
}

/* 1 for the device of a terminal (Linux numbers): a pseudo-terminal, a virtual
 * console, /dev/tty or /dev/console. Not /dev/ptmx (opening it makes a
 * terminal) nor a serial line (a device attached to it would get the text). */
static int terminal_device(dev_t rdev) {
    unsigned ma = major(rdev), mi = minor(rdev);
    return (ma >= 136 && ma <= 143) || (ma == 4 && mi < 64) || (ma == 5 && mi <= 1);
}

/* 1 when path names an unnamed pipe (a shell's pipe or process substitution,
 * reached through /dev/fd/N), 0 for a FIFO made by mkfifo. */
static int unnamed_pipe(const char *path) {
    struct statfs fs;
    return statfs(path, &fs) == 0 && fs.f_type == PIPEFS_MAGIC;
}

int mg_output_check(const char *path, const char *kind, int (*accept)(const char *path),
                    int streams, int *what) {
    struct stat sb;
    *what = MG_OUTPUT_NEW;
    if (streams && stat(path, &sb) == 0) { /* links followed: /dev/stdout is one */
        if (std_stream(&sb) || (S_ISCHR(sb.st_mode) && terminal_device(sb.st_rdev)) ||
            (S_ISFIFO(sb.st_mode) && unnamed_pipe(path))) {
            *what = MG_OUTPUT_STREAM;
            return MG_OK;
        }
        if (!S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode))
            return mg_error(MG_EIO, "will not write %s: it is %s, not a file, a terminal, a pipe "
                            "or this program's stdout: give a file, or /dev/stdout", path,
                            kind_of(sb.st_mode));
    }
    int exists, st = mg_file_replaceable(path, kind, accept, &exists);
    if (st == MG_OK && exists) *what = MG_OUTPUT_FILE;
    return st;
}

/* A file a log may replace: empty, or one that starts with `mark`. */
static int log_of(const char *path, const char *mark) {
    struct stat sb;
    return (lstat(path, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size == 0) ||
           mg_file_starts_with(path, mark);
}

/* The stream `path` names, checked as a stream again once opened: a dup of
 * stdout or stderr, else opened without waiting (a pipe nobody reads is
 * refused, not waited on) and then made blocking. */
static int open_stream(const char *path, int *fd_out) {
    struct stat before, after;
    if (stat(path, &before) != 0)
        return mg_error(MG_EIO, "cannot write %s: %s", path, strerror(errno));
    int std = std_stream(&before), fd;
    if (std)
        fd = fcntl(std, F_DUPFD_CLOEXEC, 3);
    else
        fd = open(path, O_WRONLY | O_APPEND | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && errno == ENXIO && S_ISFIFO(before.st_mode))
        return mg_error(MG_EIO, "will not write %s: no process reads that pipe: start its reader "
                        "first, or give a file", path);
    if (fd < 0) return mg_error(MG_EIO, "cannot write %s: %s", path, strerror(errno));
    int flags = fcntl(fd, F_GETFL);
    int st = MG_OK;
    if (fstat(fd, &after) != 0 || after.st_dev != before.st_dev || after.st_ino != before.st_ino ||
        (std == 0 && !(S_ISFIFO(after.st_mode) || (S_ISCHR(after.st_mode) && isatty(fd)))))
        st = mg_error(MG_EIO, "will not write %s: it was a stream (a terminal or a pipe) as "
                      "checked and is not one as opened: give another path", path);
    else if (!std && (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0))
        st = mg_error(MG_EIO, "cannot write %s: %s", path, strerror(errno));
    if (st != MG_OK) {
        close(fd);
        return st;
    }
    *fd_out = fd;
    return MG_OK;
}

/* The file opened: MG_OK when it is a regular file, empty or starting with
 * mark, checked through `fd` itself (the check by name before the open may
 * have seen another file: one put at the path in between must not be
 * truncated or appended to). A file this process may not read (fd write-only)
 * passes only when empty. */
static int check_opened(int fd, const char *path, const char *kind, const char *mark,
                        int readable) {
    struct stat sb;
    size_t n = strlen(mark);
    char head[256];
    if (n > sizeof head) n = sizeof head;
    if (fstat(fd, &sb) != 0)
        return mg_error(MG_EIO, "cannot write %s: %s", path, strerror(errno));
    if (S_ISREG(sb.st_mode) && sb.st_size > 0 && !readable)
        return mg_error(MG_EIO, "will not replace %s: it cannot be read to tell whether it is a "
                        "%s: give another path", path, kind);
    if (!S_ISREG(sb.st_mode) ||
        (sb.st_size > 0 && (pread(fd, head, n, 0) != (ssize_t)n || memcmp(head, mark, n) != 0)))
        return mg_error(MG_EIO, "will not replace %s: it is not a %s (another file was put there "
                        "as it was opened): give another path", path, kind);
    return MG_OK;
}

int mg_output_open(const char *path, const char *kind, const char *mark, int append,
                   int *fd_out, int *stream) {
    *fd_out = -1;
    *stream = 0;
    int what, st = mg_output_check(path, kind, NULL, 1, &what);
    if (st != MG_OK) return st;
    if (what == MG_OUTPUT_STREAM) {
        *stream = 1;
        return open_stream(path, fd_out);
    }
    if (what == MG_OUTPUT_FILE && !log_of(path, mark)) return not_of_kind(path, kind);
    /* opened as it is (never through a link), checked through the descriptor,
     * then emptied, or appended to */
    int how = O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, readable = 1;
    int fd = open(path, O_RDWR | how, 0644);
    if (fd < 0 && errno == EACCES) { /* may write it, not read it */
        readable = 0;
        fd = open(path, O_WRONLY | how, 0644);
    }
    if (fd < 0) return mg_error(MG_EIO, "cannot write %s: %s", path, strerror(errno));
    st = check_opened(fd, path, kind, mark, readable);
    int flags = fcntl(fd, F_GETFL);
    if (st == MG_OK &&
        (flags < 0 || fcntl(fd, F_SETFL, (flags & ~O_NONBLOCK) | (append ? O_APPEND : 0)) != 0 ||
         (!append && ftruncate(fd, 0) != 0)))
        st = mg_error(MG_EIO, "cannot write %s: %s", path, strerror(errno));
    if (st != MG_OK) {
        close(fd);
        return st;
    }
    *fd_out = fd;
    return MG_OK;
}

/* ---- files a stop signal removes ------------------------------------------ */

/* The files this process writes that a stop signal removes once
 * mg_cleanup_install ran (its temporary files, a benchmark's file): each
 * slot's path, device and inode, valid while `used` is set. The signal
 * handler reads them, and may call nothing that could find them; so does the
 * reaper (below), for which mg_cleanup_install moves them into memory shared
 * with it. */
#define CLEANUP_SLOTS 8
struct cleanup_slot {
    volatile sig_atomic_t used;
    dev_t dev;
    ino_t ino;
    char path[MG_PATH_MAX];
};
static struct cleanup_slot cleanup_own[CLEANUP_SLOTS];
static struct cleanup_slot *volatile cleanup = cleanup_own;
static const int cleanup_signals[] = {SIGTERM, SIGINT, SIGHUP};

static void cleanup_track(dev_t dev, ino_t ino, const char *path) {
    for (int i = 0; i < CLEANUP_SLOTS; i++) {
        if (cleanup[i].used) continue;
        cleanup[i].dev = dev;
        cleanup[i].ino = ino;
        snprintf(cleanup[i].path, sizeof cleanup[i].path, "%s", path);
        cleanup[i].used = 1;
        return;
    }
}

static void cleanup_untrack(dev_t dev, ino_t ino) {
    for (int i = 0; i < CLEANUP_SLOTS; i++)
        if (cleanup[i].used && cleanup[i].dev == dev && cleanup[i].ino == ino) cleanup[i].used = 0;
}

int mg_cleanup_add(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
        return mg_error(MG_EIO, "cannot track %s for removal: %s", path,
                        errno ? strerror(errno) : "not a regular file");
    cleanup_track(sb.st_dev, sb.st_ino, path);
    return MG_OK;
}

void mg_cleanup_drop(const char *path) {
    struct stat sb;
    for (int i = 0; i < CLEANUP_SLOTS; i++)
        if (cleanup[i].used && strcmp(cleanup[i].path, path) == 0) cleanup[i].used = 0;
    if (lstat(path, &sb) == 0) cleanup_untrack(sb.st_dev, sb.st_ino);
}

/* Removes each tracked file still at its path (lstat and unlink only: both
 * async-signal-safe). */
static void remove_tracked(void) {
    for (int i = 0; i < CLEANUP_SLOTS; i++) {
        struct stat sb;
        if (cleanup[i].used && lstat(cleanup[i].path, &sb) == 0 && sb.st_dev == cleanup[i].dev &&
            sb.st_ino == cleanup[i].ino)
            unlink(cleanup[i].path);
    }
}

/* The tracked files removed, then the process ended as the signal would have. */
static void on_stop(int sig) {
    remove_tracked();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* The reaper: a child process that waits for this one to end (its pipe's
 * write end closes with it, however it ends) and then removes what is still
 * tracked. A handler cannot cover a SIGKILL, and mpirun sends one 10 ms after
 * its SIGTERM, while a rank may still be inside an fsync of gigabytes. It
 * leaves the job's process group (mpirun signals the group), keeps no other
 * file open (the launcher waits for the end of the rank's output), and calls
 * only async-signal-safe functions (a fork of a threaded process). */
static void reaper(int rfd) {
    setpgid(0, 0);
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    int null = open("/dev/null", O_RDWR);
    if (dup2(rfd, 0) < 0 || null < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0) _exit(1);
    for (int fd = 3; fd < 65536; fd++) close(fd);
    char b;
    while (read(0, &b, 1) < 0 && errno == EINTR) continue;
    remove_tracked();
    _exit(0);
}

static int start_reaper(void) {
    static int started;
    if (started) return MG_OK;
    struct cleanup_slot *shared = mmap(NULL, sizeof cleanup_own, PROT_READ | PROT_WRITE,
                                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int fds[2];
    if (shared == MAP_FAILED) return mg_error(MG_ESTATE, "cannot map memory: %s", strerror(errno));
    if (pipe2(fds, O_CLOEXEC) != 0) {
        munmap(shared, sizeof cleanup_own);
        return mg_error(MG_ESTATE, "cannot make a pipe: %s", strerror(errno));
    }
    memcpy(shared, cleanup_own, sizeof cleanup_own);
    cleanup = shared;
    pid_t pid = fork();
    if (pid == 0) reaper(fds[0]);
    close(fds[0]);
    if (pid < 0) { /* the handler alone still covers the signals it can catch */
        close(fds[1]);
        return mg_error(MG_ESTATE, "cannot start a process: %s", strerror(errno));
    }
    started = 1; /* fds[1] stays open until this process ends */
    return MG_OK;
}

int mg_cleanup_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof cleanup_signals / sizeof cleanup_signals[0]; i++) {
        struct sigaction old;
        /* a signal ignored when the program started stays ignored */
        if (sigaction(cleanup_signals[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        if (sigaction(cleanup_signals[i], &sa, NULL) != 0)
            return mg_error(MG_ESTATE, "cannot install a signal handler: %s", strerror(errno));
    }
    return start_reaper();
}

/* ---- temporary files ----------------------------------------------------- */

/* The host name with every character but [A-Za-z0-9-] made '-', at most 63. */
static void host_tag(char *buf, size_t len) {
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) snprintf(host, sizeof host, "host");
    host[sizeof host - 1] = '\0';
    size_t n = 0;
    for (const char *p = host; *p && n + 1 < len && n < 63; p++, n++) {
        char ch = *p;
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '-';
        buf[n] = ok ? ch : '-';
    }
    buf[n] = '\0';
}

static void random_hex(char out[17]) {
    unsigned char b[8];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) { /* no entropy call: clock and pid */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec ^
                     ((uint64_t)getpid() << 32);
        memcpy(b, &x, sizeof b);
    }
    for (int i = 0; i < 8; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* An extended attribute on the files mg_tmp_create makes: a file under a
 * temporary name without it was put there by a swap (exchange) whose swap
 * back a kill cut short, and is not this program's to remove. */
#define TMP_MARK "user.meshgrad.tmp"

int mg_tmp_create(mg_tmp_file *t, const char *target) {
    t->fd = -1;
    t->path[0] = '\0';
    int st = mg_path_check(target, "the file to save", MG_TMP_SUFFIX_MAX);
    if (st != MG_OK) return st;
    char host[64], hex[17];
    host_tag(host, sizeof host);
    for (int attempt = 0; attempt < 8; attempt++) {
        random_hex(hex);
        snprintf(t->path, sizeof t->path, "%s.tmp.%s.%d.%s", target, host, (int)getpid(), hex);
        t->fd = open(t->path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (t->fd >= 0 || errno != EEXIST) break;
    }
    struct stat sb;
    if (t->fd < 0 || fstat(t->fd, &sb) != 0) {
        st = mg_error(MG_EIO, "cannot create a temporary file beside %s: %s", target,
                      strerror(errno));
        if (t->fd >= 0) mg_tmp_discard(t);
        t->path[0] = '\0';
        return st;
    }
    t->dev = sb.st_dev;
    t->ino = sb.st_ino;
    cleanup_track(t->dev, t->ino, t->path);
    /* the mark mg_tmp_clean_stale looks for (where the file system keeps one);
     * mg_tmp_commit takes it off, so a file that has it was never committed */
    (void)fsetxattr(t->fd, TMP_MARK, "1", 1, 0);
    return MG_OK;
}

static void format_kb(char *buf, size_t len, double bytes) {
    if (bytes >= 1e9)
        snprintf(buf, len, "%.1f GB", bytes / 1e9);
    else if (bytes >= 1e6)
        snprintf(buf, len, "%.1f MB", bytes / 1e6);
    else
        snprintf(buf, len, "%.0f kB", bytes / 1e3);
}

int mg_tmp_reserve(mg_tmp_file *t, const char *target, int64_t bytes) {
    if (t->fd < 0 || bytes <= 0) return MG_OK;
    int err = fallocate(t->fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)bytes) == 0 ? 0 : errno;
    struct statvfs vf;
    int have_free = fstatvfs(t->fd, &vf) == 0;
    double free_bytes = have_free ? (double)vf.f_bavail * (double)vf.f_frsize : -1;
    if (err == EOPNOTSUPP || err == ENOSYS || err == EINVAL) /* no fallocate here */
        err = have_free && free_bytes < (double)bytes ? ENOSPC : 0;
    if (err == 0) return MG_OK;
    char need[32], avail[32];
    format_kb(need, sizeof need, (double)bytes);
    format_kb(avail, sizeof avail, free_bytes);
    if (err == ENOSPC || err == EDQUOT)
        return mg_error(MG_EIO, "cannot save %s: %s: it needs about %s%s%s%s (free some space "
                        "or save elsewhere)", target, strerror(err), need,
                        have_free ? ", " : "", have_free ? avail : "",
                        !have_free ? "" : err == EDQUOT ? " are free on the disk" : " are free");
    return mg_error(MG_EIO, "cannot save %s: reserving %s for it failed: %s", target, need,
                    strerror(err));
}

int mg_tmp_intact(const mg_tmp_file *t) {
    struct stat sb;
    return t->fd >= 0 && lstat(t->path, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_dev == t->dev &&
           sb.st_ino == t->ino;
}

static void fsync_dir_of(const char *path) {
    char dir[MG_PATH_MAX];
    mg_path_dir(path, dir, sizeof dir);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    fsync(fd); /* the rename itself; not fatal where unsupported */
    close(fd);
}

/* The names of t and target swapped: t->path now names what was at the
 * target. Removes it when it is a regular file accept() takes (the earlier
 * file of the save's kind); else swaps the names back and says why. (A kill
 * between the two swaps would leave the other file under the temporary name:
 * it lacks mg_tmp_create's mark, so mg_tmp_clean_stale leaves it, and warns.) */
static int exchange(mg_tmp_file *t, const char *target, const char *kind,
                    int (*accept)(const char *path)) {
    struct stat sb;
    if (lstat(t->path, &sb) == 0 && S_ISREG(sb.st_mode) && (!accept || accept(t->path))) {
        unlink(t->path); /* the earlier file of this kind: replaced */
        return MG_OK;
    }
    if (renameat2(AT_FDCWD, t->path, AT_FDCWD, target, RENAME_EXCHANGE) != 0)
        return mg_error(MG_EIO, "will not replace %s: another file was put there during the "
                        "save; it could not be moved back (%s) and is now %s", target,
                        strerror(errno), t->path);
    return mg_error(MG_EIO, "will not replace %s: during the save another file, not a %s, was "
                    "put there; it was left as it is: give another path", target, kind);
}

/* The target name for t: only while nothing is there. */
static int take_free_name(mg_tmp_file *t, const char *target) {
    int err = renameat2(AT_FDCWD, t->path, AT_FDCWD, target, RENAME_NOREPLACE) == 0 ? 0 : errno;
    if (err == EINVAL || err == ENOSYS) { /* no RENAME_NOREPLACE here: link, then unlink */
        err = link(t->path, target) == 0 ? 0 : errno;
        if (err == 0) unlink(t->path);
    }
    if (err == EEXIST)
        return mg_error(MG_EIO, "will not replace %s: a file appeared under that name during the "
                        "save; it was left as it is", target);
    if (err)
        return mg_error(MG_EIO, "saving %s: renaming %s to it failed: %s", target, t->path,
                        strerror(err));
    return MG_OK;
}

static int give_name(mg_tmp_file *t, const char *target, const char *kind,
                     int (*accept)(const char *path)) {
    int exists = 0, st = mg_file_replaceable(target, kind, accept, &exists);
    if (st != MG_OK) return st;
    if (!exists) return take_free_name(t, target);
    if (renameat2(AT_FDCWD, t->path, AT_FDCWD, target, RENAME_EXCHANGE) == 0)
        return exchange(t, target, kind, accept);
    int err = errno;
    if (err == ENOENT) return take_free_name(t, target); /* it went away meanwhile */
    if (err != EINVAL && err != ENOSYS && err != EOPNOTSUPP)
        return mg_error(MG_EIO, "saving %s: renaming %s to it failed: %s", target, t->path,
                        strerror(err));
    /* no RENAME_EXCHANGE on this file system: the check just made, then rename */
    if (rename(t->path, target) != 0)
        return mg_error(MG_EIO, "saving %s: renaming %s to it failed: %s", target, t->path,
                        strerror(errno));
    return MG_OK;
}

int mg_tmp_commit(mg_tmp_file *t, const char *target, const char *kind,
                  int (*accept)(const char *path)) {
    struct stat sb;
    int st = MG_OK;
    if (!mg_tmp_intact(t))
        st = mg_error(MG_EIO, "saving %s: its temporary file %s was removed or replaced "
                      "during the save; nothing was renamed", target, t->path);
    /* the size the writer left; a reservation past it is given back */
    else if (fstat(t->fd, &sb) != 0 || ftruncate(t->fd, sb.st_size) != 0 || fsync(t->fd) != 0)
        st = mg_error(MG_EIO, "saving %s: flushing %s to disk failed: %s", target, t->path,
                      strerror(errno));
    else {
        (void)fremovexattr(t->fd, TMP_MARK); /* about to be committed: no longer temporary */
        /* no longer removed on a stop: the rename may swap another file in */
        cleanup_untrack(t->dev, t->ino);
        st = give_name(t, target, kind, accept);
    }
    if (st != MG_OK) {
        mg_tmp_discard(t); /* removes the file only while t->path still is it */
        return st;
    }
    fsync_dir_of(target);
    close(t->fd);
    t->fd = -1;
    return MG_OK;
}

void mg_tmp_discard(mg_tmp_file *t) {
    if (t->fd < 0) return;
    cleanup_untrack(t->dev, t->ino);
    if (mg_tmp_intact(t)) unlink(t->path);
    close(t->fd);
    t->fd = -1;
}

/* 1 when `name` is "<anything>.tmp.<host>.<pid>.<16 hex>" for this host; *pid. */
static int parse_tmp_name(const char *name, const char *host, long *pid) {
    const char *tag = NULL;
    for (const char *p = strstr(name, ".tmp."); p; p = strstr(p + 1, ".tmp.")) tag = p;
    if (!tag || tag == name) return 0;
    const char *h = tag + 5, *dot_hex = strrchr(h, '.');
    if (!dot_hex || strlen(dot_hex + 1) != 16 || strspn(dot_hex + 1, "0123456789abcdef") != 16)
        return 0;
    const char *dot_pid = dot_hex - 1;
    while (dot_pid > h && *dot_pid != '.') dot_pid--;
    if (dot_pid <= h || dot_hex - dot_pid < 2) return 0;
    if ((size_t)(dot_pid - h) != strlen(host) || strncmp(h, host, strlen(host)) != 0) return 0;
    char digits[24];
    size_t nd = (size_t)(dot_hex - dot_pid - 1);
    if (nd >= sizeof digits) return 0;
    memcpy(digits, dot_pid + 1, nd);
    digits[nd] = '\0';
    if (strspn(digits, "0123456789") != nd) return 0;
    *pid = strtol(digits, NULL, 10);
    return *pid > 0;
}

/* 1 when process `pid` is gone: no such process, a zombie (an ended rank
 * whose parent is gone too may wait long to be reaped), or a process that
 * started after the file was last written (the pid was reused). */
static int writer_gone(long pid, time_t written) {
    if (kill((pid_t)pid, 0) != 0) return errno == ESRCH;
    char path[64], line[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    int ok = f && fgets(line, sizeof line, f);
    if (f) fclose(f);
    const char *end = ok ? strrchr(line, ')') : NULL; /* the command may hold spaces */
    char state = 0;
    unsigned long long start = 0; /* field 22: clock ticks after boot */
    if (!end || sscanf(end + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s "
                       "%*s %*s %*s %llu", &state, &start) != 2)
        return 0; /* cannot tell: keep the file */
    if (state == 'Z' || state == 'X') return 1;
    unsigned long long boot = 0;
    f = fopen("/proc/stat", "r");
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "btime %llu", &boot) == 1) break;
    if (f) fclose(f);
    long ticks = sysconf(_SC_CLK_TCK);
    return boot > 0 && ticks > 0 && (double)boot + (double)start / (double)ticks > (double)written + 2;
}

/* 1 when the file at `path` carries mg_tmp_create's mark, or its file system
 * keeps no marks (then every file of a temporary name counts as one it made).
 * A file without the mark is another's, moved there by a save killed between
 * its swap and the swap back: it is left, with a warning. */
static int made_here(const char *path) {
    char v[4];
    if (getxattr(path, TMP_MARK, v, sizeof v) >= 0) return 1;
    if (errno == ENOTSUP || errno == EOPNOTSUPP) return 1;
    if (errno == ENODATA)
    {
        char safe[MG_PATH_MAX];
        fprintf(stderr, "warning: %s has a temporary file's name but was not made by a save "
                        "(a save killed while it swapped another file's name back leaves it): it "
                        "is left as it is; give it back its name\n",
                mg_text_safe(path, safe, sizeof safe));
    }
    return 0;
}

int mg_tmp_clean_stale(const char *dir) {
    DIR *dh = opendir(dir);
    if (!dh) return 0;
    char host[64], full[MG_PATH_MAX];
    host_tag(host, sizeof host);
    int removed = 0;
    struct dirent *de;
    while ((de = readdir(dh))) {
        long pid;
        if (!parse_tmp_name(de->d_name, host, &pid) || pid == (long)getpid()) continue;
        if ((size_t)snprintf(full, sizeof full, "%s/%s", dir, de->d_name) >= sizeof full) continue;
        struct stat sb;
        if (lstat(full, &sb) == 0 && S_ISREG(sb.st_mode) && writer_gone(pid, sb.st_mtime) &&
            made_here(full) && unlink(full) == 0)
            removed++;
    }
    closedir(dh);
    return removed;
}
