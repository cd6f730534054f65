/* status.h: error reporting inside meshgrad.
 * mg_error(code, fmt, ...) records this thread's last message and returns code,
 * so a failing call reads `return mg_error(MG_ESHAPE, "...", ...);`.
 * mg_last_error() (public) reads it back. */
#ifndef MG_STATUS_H
#define MG_STATUS_H

#include <stdbool.h>

#include "meshgrad.h"

#if defined(__GNUC__)
#define MG_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define MG_PRINTF(a, b)
#endif

int mg_error(int code, const char *fmt, ...) MG_PRINTF(2, 3);
/* Like mg_error but returns NULL, for constructors. */
void *mg_error_null(int code, const char *fmt, ...) MG_PRINTF(2, 3);
/* The getters' check: false, with the message "<who>: <what> is NULL", when p
 * is NULL, so a NULL argument never leaves an older, unrelated message in
 * mg_last_error(). */
bool mg_arg_given(const void *p, const char *who, const char *what);
/* The code of this thread's last error (MG_OK after mg_clear_error). */
int mg_last_code(void);
void mg_clear_error(void);
const char *mg_status_name(int code); /* "MG_ESHAPE" */

#endif
