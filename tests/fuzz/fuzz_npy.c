/* libFuzzer target: the .npy parser and the conversion to its element type over arbitrary
 * bytes (held in memory as an es_file named "fuzz-input"). */
#include <stdint.h>
#include <stdlib.h>

#include "embedscope/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    es_file f = {.path = "fuzz-input", .bytes = size ? data : NULL, .size = size};
    es_tensor *t;
    es_err err;
    if (es_npy_parse(&f, &t, &err) != 0)
        return 0;
    void *x;
    es_elem elem;
    size_t rows, cols;
    if (es_tensor_convert(t, &x, &elem, &rows, &cols, &err) == 0)
        free(x);
    es_tensor_free(t);
    return 0;
}
