// A partial plotly.js with 3-D scatter (WebGL) for the side-by-side PCA: the 2-D build's trace
// types plus scatter3d, 1.7 MB minified instead of the full bundle's 4.8 MB, and none of the
// map/geo code with its tile-server URLs. Loaded only when a 3-D plot is first drawn.
var Plotly = require('plotly.js/lib/core');
Plotly.register([require('plotly.js/lib/scatter3d'), require('plotly.js/lib/heatmap'), require('plotly.js/lib/bar')]);
window.Plotly3D = Plotly;
