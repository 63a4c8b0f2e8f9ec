/* Build identity. ES_COMMIT is the git commit the binary was built from; the
 * Makefile passes it to this file alone (and rebuilds it when the commit
 * changes), "unknown" outside a git checkout or in builds that do not pass it. */
#include "embedscope/version.h"

#ifndef ES_COMMIT
#define ES_COMMIT "unknown"
#endif

const char es_build_commit[] = ES_COMMIT;
