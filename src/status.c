/* status.c: per-thread last error message and code (see status.h). */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_message[1024];
static _Thread_local int last_code;

static void record(int code, const char *fmt, va_list ap) {
    last_code = code;
    vsnprintf(last_message, sizeof last_message, fmt, ap);
}

int mg_error(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    record(code, fmt, ap);
    va_end(ap);
    return code;
}

void *mg_error_null(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    record(code, fmt, ap);
    va_end(ap);
    return NULL;
}

bool mg_arg_given(const void *p, const char *who, const char *what) {
    if (!p) mg_error(MG_EINVAL, "%s: %s is NULL", who, what);
    return p != NULL;
}

const char *mg_last_error(void) { return last_message; }
int mg_last_code(void) { return last_code; }

void mg_clear_error(void) {
    last_code = MG_OK;
    last_message[0] = '\0';
}

const char *mg_status_name(int code) {
    switch (code) {
    case MG_OK: return "MG_OK";
    case MG_EINVAL: return "MG_EINVAL";
    case MG_ESHAPE: return "MG_ESHAPE";
    case MG_EPLACEMENT: return "MG_EPLACEMENT";
    case MG_EMESH: return "MG_EMESH";
    case MG_ENOMEM: return "MG_ENOMEM";
    case MG_EIO: return "MG_EIO";
    case MG_EFORMAT: return "MG_EFORMAT";
    case MG_ECOMM: return "MG_ECOMM";
    case MG_ESTATE: return "MG_ESTATE";
    case MG_EDEVICE: return "MG_EDEVICE";
    default: return "MG_E?";
    }
}
