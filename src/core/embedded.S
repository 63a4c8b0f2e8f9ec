/* Files compiled into the binary: the default configuration and the OpenAPI
 * document, each NUL-terminated so C code can use them as strings. */
    .section .rodata
    .global es_embedded_config
    .type es_embedded_config, @object
es_embedded_config:
    .incbin "config/embedscope.json"
    .byte 0
    .global es_embedded_openapi
    .type es_embedded_openapi, @object
es_embedded_openapi:
    .incbin "openapi.yaml"
    .byte 0
    .section .note.GNU-stack,"",@progbits
