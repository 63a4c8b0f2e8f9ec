// A partial plotly.js: the core (with scatter, for lines and 2-D points) plus the two trace
// types the dashboard draws, 3-D scatter (WebGL) and heatmap. 1.7 MB minified instead of the
// full bundle's 4.8 MB, and none of the map/geo code with its tile-server URLs.
var Plotly = require('plotly.js/lib/core');
Plotly.register([require('plotly.js/lib/scatter3d'), require('plotly.js/lib/heatmap'), require('plotly.js/lib/bar')]);
window.Plotly = Plotly;
