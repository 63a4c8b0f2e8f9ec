/* libFuzzer target: the safetensors validator, name listing, and parsing plus
 * conversion of every listed tensor, over arbitrary bytes held in memory as an
 * es_file named "fuzz-input". */
#include <stdint.h>
#include <stdlib.h>

#include "embedscope/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    es_file f = {.path = "fuzz-input", .bytes = size ? data : NULL, .size = size};
    es_err err;
    char **names;
    if (es_safetensors_names(&f, &names, &err) != 0)
        return 0;
    for (size_t i = 0; names[i]; i++) {
        es_tensor *t;
        if (es_safetensors_parse(&f, names[i], &t, &err) != 0)
            continue;
        void *x;
        es_elem elem;
        size_t rows, cols;
        if (es_tensor_convert(t, &x, &elem, &rows, &cols, &err) == 0)
            free(x);
        es_tensor_free(t);
    }
    es_strv_free(names);
    return 0;
}
