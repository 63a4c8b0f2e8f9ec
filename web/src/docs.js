// The API reference at /docs: Swagger UI (swagger-ui-dist, pinned in package.json) rendering the
// daemon's own openapi.yaml, fetched relative to this page so that it works under a proxy prefix.
// No validator badge (it would send the document to validator.swagger.io).
//
// Accessibility (axe-core, tests/browser testDocsAccessibility: no serious or critical violation,
// collapsed, with an operation open in "Try it out" and after Execute). docs.css fixes the colours;
// what needs the markup is done here:
// - An operation's summary is one button (open/close) that held the deep link to the operation,
//   an <a href> inside a <button> (axe nested-interactive, 41 operations). The summary's path is
//   drawn without its link (the plugin below); the deep links still work: opening an operation
//   writes #/tag/operationId into the address bar (deepLinking) and such a link opens it.
// - Selects Swagger UI leaves without a name (the server, an enum parameter's value) are named
//   after what they choose, and a code block that scrolls can take the focus so a keyboard can
//   scroll it: done on each change of the rendered page (a MutationObserver), since Swagger UI
//   renders them on demand.
(function () {
    var el = document.getElementById('swagger');
    function summaryPathWithoutLink(Original, system) {
        return function (props) {
            var op = props.operationProps;
            return system.React.createElement(Original, Object.assign({}, props,
                { operationProps: op && op.set ? op.set('isDeepLinkingEnabled', false) : op }));
        };
    }
    function name(node, text) {
        if (!node.hasAttribute('aria-label') && !node.hasAttribute('aria-labelledby')) node.setAttribute('aria-label', text);
    }
    function fix() {
        el.querySelectorAll('.copy-to-clipboard button').forEach(function (b) { name(b, 'copy to clipboard'); });
        var servers = el.querySelector('#servers');
        if (servers) name(servers, 'server');
        el.querySelectorAll('tr[data-param-name] select, tr[data-param-name] input, tr[data-param-name] textarea').forEach(function (s) {
            name(s, s.closest('tr').getAttribute('data-param-name'));
        });
        el.querySelectorAll('.body-param-content-type select, .response-control-media-type select, .content-type').forEach(function (s) {
            if (s.tagName === 'SELECT') name(s, 'media type');
        });
        el.querySelectorAll('pre, .microlight, .highlight-code, textarea').forEach(function (p) {
            if (p.scrollHeight > p.clientHeight + 1 || p.scrollWidth > p.clientWidth + 1) {
                if (!p.hasAttribute('tabindex')) p.setAttribute('tabindex', '0');
            }
        });
    }
    var queued = false;
    new MutationObserver(function () {
        if (queued) return;
        queued = true;
        requestAnimationFrame(function () { queued = false; fix(); });
    }).observe(el, { childList: true, subtree: true });
    window.ui = SwaggerUIBundle({
        url: el.getAttribute('data-spec'),
        domNode: el,
        deepLinking: true,
        validatorUrl: null,
        tryItOutEnabled: false,
        // Code blocks (examples, responses, curl) highlighted with a theme whose every colour is
        // legible on its background (the default, agate, draws numbers at 3.4:1).
        syntaxHighlight: { theme: 'arta' },
        plugins: [function () { return { wrapComponents: { OperationSummaryPath: summaryPathWithoutLink } }; }],
    });
})();
