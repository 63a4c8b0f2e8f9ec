/* The service's version and the build's commit (--version, /v1, embedscope_build_info).
 * ES_VERSION is read by scripts/container.sh and tests/deploy (the image's labels).
 * Owner: src/api/version.c. */
#ifndef ES_VERSION_H
#define ES_VERSION_H

#define ES_VERSION "0.1.0"
/* The git commit of this build ("<12 hex>[-dirty]"), or "unknown" (version.c). */
extern const char es_build_commit[];

#endif
