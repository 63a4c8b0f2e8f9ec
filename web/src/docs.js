// The API reference at /docs: Swagger UI (swagger-ui-dist, pinned in package.json) rendering the
// daemon's own openapi.yaml, fetched relative to this page so that it works under a proxy prefix.
// No validator badge (it would send the document to validator.swagger.io).
(function () {
    var el = document.getElementById('swagger');
    window.ui = SwaggerUIBundle({
        url: el.getAttribute('data-spec'),
        domNode: el,
        deepLinking: true,
        validatorUrl: null,
        tryItOutEnabled: false,
    });
})();
