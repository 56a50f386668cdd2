// Draws the nbmq report's charts from the JSON embedded in the page, with uPlot (MIT, see
// uPlot.LICENSE beside this file). Charts of one group (a capture) share one time axis: a zoom
// (drag across a chart) or a reset (double-click) in one sets the same x range in all of them,
// and the cursor moves across them together. Hovering shows every series' value in the legend;
// clicking a legend entry hides or shows its series.
(function () {
  "use strict";
  var spec = JSON.parse(document.getElementById("nbmq-report-data").textContent);
  var groups = {};
  var charts = [];
  window.nbmqCharts = charts;

  function fmt(v) {
    if (v == null) return "–";
    var a = Math.abs(v);
    if (a !== 0 && (a < 0.001 || a >= 1e6)) return v.toExponential(2);
    return v.toLocaleString(undefined, {maximumFractionDigits: a < 10 ? 3 : 1});
  }

  function fmtSeconds(v) {
    if (v == null) return "–";
    var a = Math.abs(v);
    if (a === 0) return "0";
    if (a < 1e-3) return +(v * 1e6).toPrecision(3) + " µs";
    if (a < 1) return +(v * 1e3).toPrecision(3) + " ms";
    return +v.toPrecision(3) + " s";
  }

  function syncRange(source) {
    var group = groups[source._nbmqGroup] || [];
    var x = source.scales.x;
    group.forEach(function (other) {
      if (other === source || other._nbmqSyncing) return;
      if (other.scales.x.min === x.min && other.scales.x.max === x.max) return;
      other._nbmqSyncing = true;
      try { other.setScale("x", {min: x.min, max: x.max}); } finally { other._nbmqSyncing = false; }
    });
  }

  function drawShade(u, c) {
    if (!c.shade) return;
    var ctx = u.ctx, x0 = u.valToPos(c.shade[0], "x", true), x1 = u.valToPos(c.shade[1], "x", true);
    ctx.save();
    ctx.fillStyle = "rgba(160,160,160,0.25)";
    ctx.fillRect(Math.max(x0, u.bbox.left), u.bbox.top, Math.max(0, Math.min(x1, u.bbox.left + u.bbox.width) - Math.max(x0, u.bbox.left)), u.bbox.height);
    ctx.restore();
  }

  function drawLanes(u, c) {
    var ctx = u.ctx, xs = u.data[0], pxr = devicePixelRatio || 1;
    var laneH = Math.abs(u.valToPos(1, "y", true) - u.valToPos(0, "y", true));
    ctx.save();
    ctx.beginPath();
    ctx.rect(u.bbox.left, u.bbox.top, u.bbox.width, u.bbox.height);
    ctx.clip();
    for (var s = 1; s < u.series.length; s++) {
      if (!u.series[s].show) continue;
      var ys = u.data[s];
      ctx.fillStyle = c.series[s - 1].color;
      for (var i = 0; i + 1 < xs.length; i++) {
        if (ys[i] == null) continue;
        var x0 = u.valToPos(xs[i], "x", true), x1 = u.valToPos(xs[i + 1], "x", true);
        var y = u.valToPos(ys[i], "y", true);
        ctx.fillRect(x0, y - laneH * 0.3, Math.max(x1 - x0, pxr), laneH * 0.6);
      }
    }
    (c.markers || []).forEach(function (m) {
      var x = u.valToPos(m.x, "x", true), y = u.valToPos(m.lane, "y", true);
      ctx.fillStyle = m.color;
      ctx.strokeStyle = m.color;
      ctx.lineWidth = 2 * pxr;
      ctx.beginPath();
      ctx.moveTo(x, y - laneH * 0.45);
      ctx.lineTo(x, y + laneH * 0.45);
      ctx.stroke();
      ctx.beginPath();
      ctx.moveTo(x - 5 * pxr, y - laneH * 0.45);
      ctx.lineTo(x + 5 * pxr, y - laneH * 0.45);
      ctx.lineTo(x, y - laneH * 0.45 + 7 * pxr);
      ctx.closePath();
      ctx.fill();
    });
    ctx.restore();
  }

  function make(c, el) {
    var lanes = c.kind === "lanes";
    var step = uPlot.paths.stepped({align: 1});
    var bars = uPlot.paths.bars({size: [0.9, 40]});
    var series = [{label: c.x.log ? "bucket from" : "t (s)", value: function (u, v) { return c.x.log ? fmtSeconds(v) : fmt(v); }}];
    c.series.forEach(function (s) {
      series.push({
        label: s.label, stroke: s.color, width: s.width, dash: s.dash,
        fill: c.kind === "bars" ? s.color + "99" : undefined,
        paths: lanes ? function () { return null; } : (c.kind === "bars" ? bars : step),
        points: {show: false}, spanGaps: false,
        value: lanes ? function (u, v) { return v == null ? "silent" : "sent"; } : function (u, v) { return fmt(v); }
      });
    });
    var yaxis = {label: c.y.label, size: lanes ? 110 : 70};
    if (lanes) {
      yaxis.splits = function () { return c.y.lanes.map(function (_, i) { return i; }); };
      yaxis.values = function (u, splits) { return splits.map(function (v) { return c.y.lanes[v] || ""; }); };
      yaxis.grid = {show: false};
    }
    var xscale = {time: false};
    if (c.x.log) { xscale.distr = 3; xscale.log = 10; }
    var opts = {
      title: c.title,
      width: Math.max(400, el.clientWidth - 10),
      height: c.height,
      series: series,
      scales: {x: xscale, y: lanes ? {range: [-0.6, c.y.lanes.length - 0.4]} : {range: function (u, lo, hi) { return [0, hi > 0 ? hi * 1.05 : 1]; }}},
      axes: [c.x.log ? {label: c.x.label, values: function (u, splits) { return splits.map(fmtSeconds); }} : {label: c.x.label}, yaxis],
      cursor: {sync: c.group ? {key: "nbmq-" + c.group} : undefined, drag: {x: true, y: false}},
      legend: {live: true},
      hooks: {
        drawClear: [function (u) { drawShade(u, c); }],
        draw: lanes ? [function (u) { drawLanes(u, c); }] : [],
        setScale: [function (u, key) { if (key === "x" && c.group) syncRange(u); }]
      }
    };
    var data = [c.x.values].concat(c.series.map(function (s) { return s.values; }));
    var u = new uPlot(opts, data, el);
    u._nbmqGroup = c.group;
    return u;
  }

  spec.charts.forEach(function (c) {
    var el = document.getElementById(c.id);
    if (!el) return;
    var u = make(c, el);
    charts.push(u);
    if (c.group) (groups[c.group] = groups[c.group] || []).push(u);
  });
})();
