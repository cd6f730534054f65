/* files.h: paths, and the files that saving writes, so that a save never
 * destroys anything (docs/CHECKPOINTS.md "What a save never does").
 * - MG_PATH_MAX: the one path-length limit of meshgrad (bytes, with the NUL);
 *   mg_path_check refuses a longer path with a message.
 * - mg_path_dir: the directory part of a path; mg_path_same_file: two paths
 *   name one existing file.
 * - mg_file_replaceable: a path may be replaced by a save only when nothing is
 *   there, or a regular file (not a link, device, FIFO, socket or directory)
 *   that the caller's test says is of the kind the save writes;
 *   mg_file_starts_with, the usual test (a file that begins with the
 *   writer's mark).
 * - mg_output_check, mg_output_open: the same rule for every output of the
 *   program (checkpoints, data sets, traces, logs, dumps); a log written line
 *   by line (--metrics) may also go to a stream: this process's stdout or
 *   stderr (/dev/stdout, whatever it is), a terminal, or an unnamed pipe. Any
 *   other device and a FIFO are refused with a message, never opened (an
 *   open may act: a FIFO without a reader blocks for ever).
 * - mg_file_open_read: an input opened only when it is a regular file (a
 *   device such as /dev/zero never ends, a FIFO blocks).
 * - mg_file_write_all, mg_file_write_f32le: the writes of a file saved
 *   whole (bytes; floats as little-endian float32, the byte order of the
 *   llama2.c and safetensors formats), carried on past short and
 *   interrupted writes.
 * - mg_tmp_file: a temporary file beside its target, created exclusively
 *   (O_CREAT | O_EXCL | O_NOFOLLOW) under an unpredictable name
 *   "<target>.tmp.<host>.<pid>.<16 hex digits>". It can reserve the space the
 *   save needs (so a full disk is found before anything is written), be
 *   committed to the target name, or be discarded (removed only while the
 *   name still is that very file).
 * - mg_tmp_clean_stale: removes the temporary files of writers that are gone
 *   (this host, a pid that no longer runs, is a zombie, or was reused by a
 *   younger process), left by saves that were killed; only files that carry
 *   mg_tmp_create's mark (an extended attribute, where the file system keeps
 *   them), so another's file that a killed save left under such a name stays.
 * - mg_cleanup_*: the files a stop signal (SIGTERM, SIGINT, SIGHUP) removes
 *   before the process ends, where a command asks for it (ckpt bench: its
 *   temporary files of gigabytes do not outlive a kill).
 * All of it is local to the calling process (the collective save is in
 * checkpoint.c). Exports the names above. */
#ifndef MG_IO_FILES_H
#define MG_IO_FILES_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define MG_PATH_MAX 4096
/* What a temporary name adds to its target: ".tmp." host "." pid "." 16 hex. */
#define MG_TMP_SUFFIX_MAX 128

/* MG_OK, or MG_EINVAL naming `what` when the path is empty or longer than
 * MG_PATH_MAX - 1 - reserve characters. */
int mg_path_check(const char *path, const char *what, size_t reserve);
/* "." for "run.h5", "/" for "/run.h5", "a/b" for "a/b/run.h5". */
void mg_path_dir(const char *path, char *dir, size_t len);
/* 1 when both paths exist and are the same file (device and inode). */
int mg_path_same_file(const char *a, const char *b);

/* MG_OK when `path` does not exist (*exists = 0) or is a regular file for
 * which accept(path) is 1 (*exists = 1); otherwise MG_EIO "will not replace
 * <path>: it is a symbolic link / a device / a directory / not a <kind>". */
int mg_file_replaceable(const char *path, const char *kind, int (*accept)(const char *path),
                        int *exists);
/* 1 when the file at `path` is a regular file (not through a link) that
 * begins with the bytes of `mark` (at most 256). */
int mg_file_starts_with(const char *path, const char *mark);

/* An input file: *fd open for reading when `path` is a regular file (links
 * followed), MG_OK; else MG_EIO "cannot open <what> <path>: ..." (missing, a
 * directory, or not a regular file: a device, FIFO or socket is not read). */
int mg_file_open_read(const char *path, const char *what, int *fd);

/* All len bytes of buf written to fd, a short or interrupted write carried
 * on: 0, or -1 (errno set where write set it). */
int mg_file_write_all(int fd, const void *buf, size_t len);
/* n floats written to fd as little-endian float32, in blocks of 4 kB: 0 or
 * -1 as mg_file_write_all. */
int mg_file_write_f32le(int fd, const float *x, int64_t n);

enum {
    MG_OUTPUT_NEW = 0,   /* nothing is there */
    MG_OUTPUT_FILE = 1,  /* a regular file accept() takes */
    MG_OUTPUT_STREAM = 2 /* stdout, stderr, a terminal or an unnamed pipe */
};
/* What the output `path` is (*what), MG_OK when it may be written: as
 * mg_file_replaceable, and where `streams` is 1 also a stream (links
 * followed). Otherwise MG_EIO naming the path and what it is. Opens nothing. */
int mg_output_check(const char *path, const char *kind, int (*accept)(const char *path),
                    int streams, int *what);
/* Opens a log written in place, *fd for writing: a stream (*stream = 1:
 * stdout or stderr duplicated, else opened without blocking: a pipe nobody
 * reads is refused), or a file where nothing is or over an empty file or one
 * that starts with `mark`, never through a link, checked again through the
 * descriptor once open, then emptied (or appended to: `append`). */
int mg_output_open(const char *path, const char *kind, const char *mark, int append, int *fd,
                   int *stream);

/* Files a stop signal removes: once mg_cleanup_install ran, SIGTERM, SIGINT
 * and SIGHUP (those not ignored at start) remove every file tracked that is
 * still the one tracked (same device and inode), then end the process as the
 * signal would. A temporary file is tracked from mg_tmp_create until its
 * commit begins or its discard; mg_cleanup_add tracks another (a file that
 * only lives while the process runs, as a benchmark's), mg_cleanup_drop
 * stops. At most 8 at a time (more are not tracked). mg_cleanup_install also
 * forks a small process that removes them once this one ended without
 * dropping them, however it ended (a SIGKILL too: mpirun sends one 10 ms
 * after its SIGTERM). */
int mg_cleanup_add(const char *path);
void mg_cleanup_drop(const char *path);
int mg_cleanup_install(void);

typedef struct {
    char path[MG_PATH_MAX];
    int fd; /* open while the file is ours; -1 when none */
    dev_t dev;
    ino_t ino;
} mg_tmp_file;

/* Creates the temporary file of `target` (mode 0666 less the umask). */
int mg_tmp_create(mg_tmp_file *t, const char *target);
/* Reserves `bytes` of disk for the file without changing its size
 * (fallocate; where the file system cannot, compares with its free space).
 * MG_EIO "... No space left on device: <target> needs about N kB, M kB free". */
int mg_tmp_reserve(mg_tmp_file *t, const char *target, int64_t bytes);
/* 1 while t->path still names the file that mg_tmp_create made. */
int mg_tmp_intact(const mg_tmp_file *t);
/* Makes the file durable and gives it the target name, never destroying a
 * file the save may not replace (mg_file_replaceable with `kind` and
 * `accept`, checked here):
 * - nothing at the target: the name is taken only while nothing is there
 *   (RENAME_NOREPLACE);
 * - a file the save may replace: the two names are swapped in one step
 *   (RENAME_EXCHANGE) and the file so moved aside is checked again. Another
 *   process may have put a file at the target after the check: then the
 *   names are swapped back, that file stays where it was, and the save fails
 *   with a message. Where the file system cannot swap names, a plain rename
 *   follows the check, as close to it as can be.
 * Releases a reservation beyond the file's end. Closes t; removes it on a
 * failure. */
int mg_tmp_commit(mg_tmp_file *t, const char *target, const char *kind,
                  int (*accept)(const char *path));
/* Removes the file (when t->path still is it) and closes t; no-op when none. */
void mg_tmp_discard(mg_tmp_file *t);
/* Removes in `dir` the temporary files made by mg_tmp_create on this host
 * whose process is gone; returns how many. */
int mg_tmp_clean_stale(const char *dir);

#endif
