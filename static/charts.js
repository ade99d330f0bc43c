/* Tower status page: what the charts add to Chart.js (Debian's libjs-chart.js has no zoom or crosshair plugin).
 * Owns window.TowerCharts:
 *   view                  the page's chart options: {skip0, smoothing (0..0.99), log}, shared by every chart
 *   setSeries(chart, i, points)  keeps a dataset's points ([{x: step, y}]) as they are and draws them through view
 *   redraw(charts)        redraws charts (an object or array of Chart instances) after view changed
 *   smooth(points, w)     TensorBoard's debiased exponential moving average of points' y
 *   plugin                the Chart.js plugin: a readout of every series' value at the step under the cursor
 *                         (the element in chart.$towerReadout gets it: never in the options, whose resolver
 *                         would walk the DOM), a drag on x to zoom, double-click to reset.
 * No state of its own besides view: each chart's unmodified points live in its datasets' `raw`. */
(function () {
  'use strict';

  const view = {skip0: false, smoothing: 0, log: false};

  /* TensorBoard's smoothing: last = w·last + (1 − w)·y, divided by 1 − w^n so the first points are not pulled
   * toward 0. Non-finite values pass through unchanged and do not enter the average. */
  function smooth(points, w) {
    if (!(w > 0)) return points;
    let last = 0, n = 0;
    return points.map((p) => {
      if (p.y === null || !Number.isFinite(p.y)) return p;
      last = last * w + (1 - w) * p.y;
      n++;
      return {x: p.x, y: last / (1 - Math.pow(w, n))};
    });
  }

  function shown(points) {
    let pts = points;
    if (view.skip0) pts = pts.filter((p) => p.x !== 0);
    if (view.log) pts = pts.filter((p) => p.y === null || p.y > 0);
    return smooth(pts, view.smoothing);
  }

  function setSeries(chart, i, points) {
    const ds = chart.data.datasets[i];
    ds.raw = points;
    ds.data = shown(points);
  }

  function redraw(charts) {
    for (const chart of Object.values(charts)) {
      for (const ds of chart.data.datasets) if (ds.raw) ds.data = shown(ds.raw);
      chart.options.scales.y.type = view.log ? 'logarithmic' : 'linear';
      chart.update('none');
    }
  }

  /* The point of pts nearest to step x (pts sorted by x), or null. */
  function nearest(pts, x) {
    let best = null;
    for (const p of pts) if (!best || Math.abs(p.x - x) < Math.abs(best.x - x)) best = p;
    return best;
  }

  const fmt = (v) => (v === null || v === undefined || !Number.isFinite(v) ? '—'
    : Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(4) : String(+v.toFixed(6)));

  /* The readout of the step nearest to the cursor: one row per dataset, its unsmoothed value at that step
   * (and the smoothed one when smoothing is on). The element carries data-step for tests and scripts. */
  function readout(chart, x) {
    const el = chart.$towerReadout;
    if (!el) return;
    const all = chart.data.datasets.flatMap((ds) => ds.data || []);
    const at = nearest(all, x);
    el.textContent = '';
    if (!at) return;
    el.dataset.step = String(at.x);
    const head = document.createElement('div');
    head.className = 'readout-step';
    head.textContent = `step ${at.x}`;
    el.appendChild(head);
    chart.data.datasets.forEach((ds, i) => {
      const raw = (ds.raw || ds.data || []).find((p) => p.x === at.x);
      const sm = (ds.data || []).find((p) => p.x === at.x);
      const row = document.createElement('div');
      row.className = 'readout-row';
      row.dataset.series = String(i);
      row.dataset.value = raw && raw.y !== null ? String(raw.y) : '';
      row.style.color = ds.borderColor;
      row.textContent = `${ds.label}: ${raw ? fmt(raw.y) : '—'}` +
        (view.smoothing > 0 && sm && raw ? ` (smoothed ${fmt(sm.y)})` : '');
      el.appendChild(row);
    });
    chart.$towerCursor = at.x;
  }

  const plugin = {
    id: 'towerReadout',
    afterEvent(chart, args) {
      const e = args.event, xs = chart.scales.x;
      /* chart.update() replays the last event: acting on a replay would update again, without end */
      if (!xs || args.replay) return;
      const x = xs.getValueForPixel(e.x);
      if (e.type === 'mousemove') {
        readout(chart, x);
        if (chart.$towerDrag) chart.$towerDrag.to = x;
        chart.draw();
      } else if (e.type === 'mousedown') {
        chart.$towerDrag = {from: x, to: x};
      } else if (e.type === 'mouseup' && chart.$towerDrag) {
        const {from, to} = chart.$towerDrag;
        chart.$towerDrag = null;
        if (Math.abs(xs.getPixelForValue(to) - xs.getPixelForValue(from)) > 5) {
          chart.options.scales.x.min = Math.min(from, to);
          chart.options.scales.x.max = Math.max(from, to);
        }
        chart.update('none');
      } else if (e.type === 'dblclick') {
        chart.options.scales.x.min = 0;
        delete chart.options.scales.x.max;
        chart.update('none');
      }
    },
    afterDraw(chart) {
      const xs = chart.scales.x, area = chart.chartArea, g = chart.ctx;
      if (!xs || !area) return;
      g.save();
      if (chart.$towerDrag) {
        const a = xs.getPixelForValue(chart.$towerDrag.from), b = xs.getPixelForValue(chart.$towerDrag.to);
        g.fillStyle = 'rgba(37, 99, 235, 0.12)';
        g.fillRect(Math.min(a, b), area.top, Math.abs(b - a), area.bottom - area.top);
      }
      if (chart.$towerCursor !== undefined) {
        const px = xs.getPixelForValue(chart.$towerCursor);
        if (px >= area.left && px <= area.right) {
          g.strokeStyle = 'rgba(100, 116, 139, 0.6)';
          g.beginPath();
          g.moveTo(px, area.top);
          g.lineTo(px, area.bottom);
          g.stroke();
        }
      }
      g.restore();
    }
  };

  window.TowerCharts = {view, setSeries, redraw, smooth, plugin};
})();
