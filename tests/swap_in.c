/* swap_in.c: an LD_PRELOAD library for test_safe_save.sh that plays another
 * process racing a program's check of a path against its use of the path: it
 * renames $MG_SWAP_FROM over the path in $MG_SWAP_PATH (exactly as the
 * program spells it), once, just before
 *   MG_SWAP_ON=open (the default): the first open(2) of the path for writing;
 *   MG_SWAP_ON=rename: the first rename(2) or renameat2(2) onto the path
 *   (a save giving its temporary file the target name).
 * The call then goes on as asked. With MG_SWAP_KILL=1 the process is killed
 * (SIGKILL) right after a renameat2(2) that swapped two names succeeds: a
 * save cut between its swap and the swap back.
 * Exports open, open64, rename, renameat2 (the C library's, after the swap). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*open_fn)(const char *path, int flags, ...);
typedef int (*rename_fn)(const char *from, const char *to);
typedef int (*renameat2_fn)(int dfrom, const char *from, int dto, const char *to, unsigned flags);

/* The swap, once, when `path` is the one and `on` the call asked for. */
static void swap_once(const char *path, const char *on) {
    static int done;
    const char *target = getenv("MG_SWAP_PATH"), *from = getenv("MG_SWAP_FROM");
    const char *want = getenv("MG_SWAP_ON") ? getenv("MG_SWAP_ON") : "open";
    if (done || !target || !from || !path || strcmp(path, target) != 0 || strcmp(on, want) != 0)
        return;
    done = 1;
    rename_fn real = (rename_fn)dlsym(RTLD_NEXT, "rename");
    if (real(from, target) != 0) perror("swap_in: rename");
}

static int open_via(const char *name, const char *path, int flags, va_list ap) {
    open_fn real = (open_fn)dlsym(RTLD_NEXT, name);
    int mode = (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(ap, int) : 0;
    if ((flags & O_ACCMODE) != O_RDONLY) swap_once(path, "open");
    return real(path, flags, mode);
}

int open(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    int fd = open_via("open", path, flags, ap);
    va_end(ap);
    return fd;
}

int open64(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    int fd = open_via("open64", path, flags, ap);
    va_end(ap);
    return fd;
}

int rename(const char *from, const char *to) {
    swap_once(to, "rename");
    return ((rename_fn)dlsym(RTLD_NEXT, "rename"))(from, to);
}

int renameat2(int dfrom, const char *from, int dto, const char *to, unsigned flags) {
    swap_once(to, "rename");
    int rc = ((renameat2_fn)dlsym(RTLD_NEXT, "renameat2"))(dfrom, from, dto, to, flags);
    if (rc == 0 && (flags & RENAME_EXCHANGE) && getenv("MG_SWAP_KILL")) raise(SIGKILL);
    return rc;
}
