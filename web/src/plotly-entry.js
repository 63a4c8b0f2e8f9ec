// A partial plotly.js for the 2-D panels: the core (with scatter, for lines and 2-D points), heatmap
// and bar. 1.2 MB minified; the page loads it after its first paint (its evaluation is one
// main-thread task) and the 3-D build (plotly3d-entry.js) only when a 3-D plot is drawn.
var Plotly = require('plotly.js/lib/core');
Plotly.register([require('plotly.js/lib/heatmap'), require('plotly.js/lib/bar')]);
window.Plotly = Plotly;
