// A partial plotly.js for the 2-D panels: the core (with scatter, for lines and 2-D points), heatmap
// and bar. 1.2 MB minified; the page loads it after its first paint (its evaluation is one
// main-thread task) when a panel of a tab after the first draws.
var Plotly = require('plotly.js/lib/core');
Plotly.register([require('plotly.js/lib/heatmap'), require('plotly.js/lib/bar')]);
window.Plotly = Plotly;
