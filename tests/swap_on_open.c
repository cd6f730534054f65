/* swap_on_open.c: an LD_PRELOAD library for test_safe_save.sh that plays
 * another process racing a program's check of a path against its open: on
 * the first open(2) for writing of the path in $MG_SWAP_PATH (exactly as the
 * program spells it), it first renames $MG_SWAP_FROM over that path, as that
 * other process could between the program's check and its open. The open
 * then goes on as asked.
 * Exports open, open64 (the C library's, after the swap). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*open_fn)(const char *path, int flags, ...);

static void swap_once(const char *path, int flags) {
    static int done;
    const char *target = getenv("MG_SWAP_PATH"), *from = getenv("MG_SWAP_FROM");
    if (done || !target || !from || !path || strcmp(path, target) != 0 ||
        (flags & O_ACCMODE) == O_RDONLY)
        return;
    done = 1;
    if (rename(from, target) != 0) perror("swap_on_open: rename");
}

static int open_via(const char *name, const char *path, int flags, va_list ap) {
    open_fn real = (open_fn)dlsym(RTLD_NEXT, name);
    int mode = (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(ap, int) : 0;
    swap_once(path, flags);
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
