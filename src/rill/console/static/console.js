// Rill console: the theme switch, and charts (uPlot) fed by the console's JSON endpoints.
(function () {
  "use strict";
  var root = document.documentElement;
  var saved = localStorage.getItem("rill-theme");
  if (saved) root.setAttribute("data-theme", saved);

  function ready(fn) { if (document.readyState !== "loading") fn(); else document.addEventListener("DOMContentLoaded", fn); }

  function loadUPlot(done) {
    if (window.uPlot) return done();
    var s = document.createElement("script");
    s.src = "/static/uPlot.iife.min.js";
    s.onload = done;
    document.head.appendChild(s);
  }

  var COLORS = ["#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#0969da", "#57606a"];

  function draw(el) {
    var url = el.getAttribute("data-chart");
    var wanted = el.getAttribute("data-series");
    fetch(url, { credentials: "same-origin" }).then(function (r) { return r.json(); }).then(function (data) {
      var names = [], labels = [];
      if (wanted === "*") {
        names = Object.keys(data.series || {}).sort();
        labels = names;
        data = Object.assign({ t: data.t }, data.series);
      } else {
        wanted.split(",").forEach(function (pair) {
          var parts = pair.split(":");
          names.push(parts[0]); labels.push(parts[1] || parts[0]);
        });
      }
      var rows = [data.t || []].concat(names.map(function (n) { return data[n] || []; }));
      var series = [{}].concat(labels.map(function (l, i) {
        return { label: l, stroke: COLORS[i % COLORS.length], width: 2, points: { show: rows[0].length < 3 } };
      }));
      el.innerHTML = "";
      if (!rows[0].length) { el.textContent = "No samples yet: they come every few seconds."; return; }
      var width = Math.max(280, el.clientWidth - 16);
      var style = getComputedStyle(document.body);
      var fg = style.color, grid = style.getPropertyValue("--line").trim() || "#ccc";
      var axis = { stroke: fg, grid: { stroke: grid }, ticks: { stroke: grid } };
      var axes = [axis, Object.assign({ size: 60 }, axis)];
      var chart = new window.uPlot({ width: width, height: 220, series: series, axes: axes }, rows, el);
      el.setAttribute("data-points", String(rows[0].length));
      el._chart = chart;
    }).catch(function (e) { el.textContent = "Chart unavailable: " + e; });
  }

  ready(function () {
    var button = document.getElementById("theme");
    if (button) button.addEventListener("click", function () {
      var dark = getComputedStyle(root).colorScheme.indexOf("dark") >= 0;
      var next = dark ? "light" : "dark";
      root.setAttribute("data-theme", next);
      localStorage.setItem("rill-theme", next);
    });
    var charts = document.querySelectorAll("[data-chart]");
    if (!charts.length) return;
    loadUPlot(function () {
      charts.forEach(draw);
      setInterval(function () { charts.forEach(draw); }, 5000);
    });
  });
})();
