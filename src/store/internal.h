/* Helpers shared by the store's loaders (not part of the public API). */
#ifndef EMBEDSCOPE_STORE_INTERNAL_H
#define EMBEDSCOPE_STORE_INTERNAL_H

#include "embedscope/store.h"

/* Fill err with ES_E_FORMAT (param "file") and the message
 * "FILE: RULE at byte OFFSET", RULE formatted from fmt; returns -1. */
int es_format_fail(es_err *err, const es_file *f, size_t offset, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A new es_tensor over f with name copied and everything else zero, shape 1 x 1. */
es_tensor *es_tensor_new(const es_file *f, const char *name);

#endif
