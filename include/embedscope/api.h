/* The analysis service (src/api), all of it: a transitional umbrella over its
 * headers while the files move to including what they use (the map of the
 * headers: docs/development.md, "The service's headers"). */
#ifndef ES_API_H
#define ES_API_H

#include "embedscope/analysis.h"
#include "embedscope/blas.h"
#include "embedscope/config.h"
#include "embedscope/core.h"
#include "embedscope/linalg.h"
#include "embedscope/positional.h"
#include "embedscope/rowsel.h"
#include "embedscope/store.h"

#include "embedscope/params.h"
#include "embedscope/problem.h"
#include "embedscope/route.h"
#include "embedscope/descriptor.h"
#include "embedscope/format.h"
#include "embedscope/render.h"
#include "embedscope/negotiate.h"
#include "embedscope/cost.h"
#include "embedscope/pool.h"
#include "embedscope/results.h"
#include "embedscope/metrics.h"
#include "embedscope/app.h"
#include "embedscope/jobs.h"
#include "embedscope/uploads.h"

#endif
