/* Tower status page: runs (sortable, filtered, ticked for comparing), a compare view, one run's live charts,
 * hyperparameter sweeps (their trials, rungs and best trial), datasets, upload, submit and devices, on the REST
 * API of server/API.md. Plain ES2017, no framework, no build step; the server embeds this file and serves it at
 * /static/app.js. Chart.js (Debian's libjs-chart.js, global `Chart`, served at /static/chart.js) draws the run
 * and sweep charts; without it the page shows the same metrics as a table.
 *
 * Routing is on the location hash (#/, #/runs/ID, #/compare/ID,ID..., #/sweeps, #/sweeps/NAME, #/datasets,
 * #/datasets/ID, #/submit, #/upload, #/devices). Each view gets a context whose timers, event sources and charts
 * are torn down when the hash changes. Every element a test drives has a stable id. DOM is built with h() (text
 * nodes, never innerHTML), so names and error messages from the server cannot inject markup. URLs are relative,
 * so the page also works behind a reverse proxy that mounts Tower under a path. */
'use strict';

(function () {
  const API = 'api/v1';
  const TERMINAL = ['succeeded', 'failed', 'cancelled'];
  const STATUSES = ['queued', 'running', 'succeeded', 'failed', 'cancelled'];
  const NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
  const TOKEN_KEY = 'tower.token';
  const METRICS_EVERY_MS = 2000;
  const LOG_EVERY_MS = 3000;
  const MAX_CHART_POINTS = 1000;
  const COLORS = ['#2563eb', '#ea580c', '#16a34a', '#9333ea', '#dc2626'];

  /* examples/seed_mlp.json with the dataset named instead of given by paths, and a run name. */
  const SEED_CONFIG = {
    name: 'seed-mlp',
    dataset: 'fashion-mnist',
    model: {
      layers: [
        {type: 'flatten'},
        {type: 'dense', units: 500, activation: 'relu', name: 'layer1',
          weight_init: {type: 'truncated_normal', stddev: 0.1},
          bias_init: {type: 'glorot_uniform'}},
        {type: 'dense', units: 10, name: 'layer2',
          weight_init: {type: 'truncated_normal', stddev: 0.1},
          bias_init: {type: 'glorot_uniform'}}
      ]
    },
    loss: 'softmax_cross_entropy',
    optimizer: {type: 'sgd', learning_rate: 0.001},
    lr_decay: {type: 'exponential', decay_steps: 1718, decay_rate: 0.99, staircase: false},
    l2: 0.0001,
    ema_decay: 0.99,
    batch_size: 32,
    towers: 1,
    steps: 30000,
    seed: 1,
    summary_every: 1000,
    eval_every: 5000,
    checkpoint_every: 5000,
    keep_checkpoints: 5
  };

  const hasChart = typeof window.Chart === 'function';
  window.towerCharts = {};
  window.towerPage = {chartjs: hasChart};

  /* ============================== DOM and formatting helpers ============================== */

  /* h('tag', {id, class, text, onclick, ...attributes}, ...children): a new element. Children are nodes,
   * strings (text), arrays, or null/false (skipped). */
  function h(tag, props, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'text') el.textContent = v;
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else if (k in el && typeof v !== 'string') el[k] = v;
      else el.setAttribute(k, v === true ? '' : v);
    }
    addKids(el, kids);
    return el;
  }

  function append(el, ...kids) {
    addKids(el, kids);
    return el;
  }

  function addKids(el, kids) {
    for (const kid of kids) {
      if (kid === null || kid === undefined || kid === false) continue;
      if (Array.isArray(kid)) addKids(el, kid);
      else el.appendChild(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
  }

  function set(el, ...kids) {
    el.replaceChildren();
    addKids(el, kids);
    return el;
  }

  const $ = (id) => document.getElementById(id);
  const isNum = (x) => typeof x === 'number' && isFinite(x);

  function fmtNum(x, digits) {
    if (!isNum(x)) return '—';
    if (x !== 0 && (Math.abs(x) >= 1e6 || Math.abs(x) < 1e-3)) return x.toExponential(2);
    return x.toFixed(digits === undefined ? 4 : digits);
  }

  function fmtInt(x) {
    return isNum(x) ? Math.round(x).toLocaleString('en-US') : '—';
  }

  function fmtPct(x) {
    return isNum(x) ? (100 * x).toFixed(2) + '%' : '—';
  }

  function fmtDuration(s) {
    if (!isNum(s) || s < 0) return '—';
    if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + 's';
    const m = Math.floor(s / 60), sec = Math.floor(s % 60);
    if (m < 60) return `${m}m ${String(sec).padStart(2, '0')}s`;
    const hr = Math.floor(m / 60);
    return `${hr}h ${String(m % 60).padStart(2, '0')}m`;
  }

  function fmtTime(t) {
    return isNum(t) ? new Date(t * 1000).toLocaleString() : '—';
  }

  function fmtBytes(n) {
    if (!isNum(n)) return '—';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : String(n)) + ' ' + units[i];
  }

  function statusBadge(status, extra) {
    return h('span', {class: `status status-${status || 'unknown'}`, text: status || '?'},
      extra ? h('span', {class: 'reason', text: ' ' + extra}) : null);
  }

  function progressBar(step, steps, id) {
    const frac = isNum(step) && isNum(steps) && steps > 0 ? Math.min(1, step / steps) : 0;
    const bar = h('div', {class: 'bar'});
    bar.style.width = (100 * frac).toFixed(1) + '%';
    return h('div', {class: 'progress', id, role: 'progressbar', 'aria-valuemin': '0', 'aria-valuemax': '100',
      'aria-valuenow': (100 * frac).toFixed(1), title: `${fmtInt(step)} / ${fmtInt(steps)} steps`},
    bar, h('span', {class: 'progress-text', text: `${fmtInt(step)} / ${fmtInt(steps)}`}));
  }

  function stepsPerSec(run) {
    const m = run.metrics || {};
    if (run.status !== 'running') return null;
    if (isNum(m.steps_per_sec)) return m.steps_per_sec;
    const batch = run.config && isNum(run.config.batch_size) ? run.config.batch_size : null;
    const towers = isNum(run.towers) ? run.towers : 1;
    if (!isNum(m.examples_per_sec) || !batch || run.status !== 'running') return null;
    return m.examples_per_sec / (batch * Math.max(1, towers));
  }

  /* Seconds trained: across every attempt (total_time_s), else the last attempt's. */
  function elapsed(run) {
    if (isNum(run.total_time_s) && (run.attempts || []).length) return run.total_time_s;
    if (!isNum(run.started)) return null;
    const end = isNum(run.finished) ? run.finished : Date.now() / 1000;
    return Math.max(0, end - run.started);
  }

  function elapsedEta(run) {
    const e = fmtDuration(elapsed(run));
    return run.status === 'running' && isNum(run.eta_s) ? `${e} / ${fmtDuration(run.eta_s)}` : e;
  }

  /* JSON like examples/*.json: a value that fits in the line stays on one line, others open up. */
  function pretty(v, indent) {
    indent = indent || '';
    const inline = (x) => {
      if (Array.isArray(x)) return '[' + x.map(inline).join(', ') + ']';
      if (x && typeof x === 'object') return '{' + Object.entries(x).map(([k, y]) => JSON.stringify(k) + ': ' + inline(y)).join(', ') + '}';
      return JSON.stringify(x === undefined ? null : x);
    };
    const flat = inline(v);
    if (!v || typeof v !== 'object' || indent.length + flat.length <= 100) return flat;
    const inner = indent + '  ';
    if (Array.isArray(v)) return '[\n' + v.map((x) => inner + pretty(x, inner)).join(',\n') + '\n' + indent + ']';
    return '{\n' + Object.entries(v).map(([k, x]) => inner + JSON.stringify(k) + ': ' + pretty(x, inner)).join(',\n') +
      '\n' + indent + '}';
  }

  function randomKey() {
    if (window.crypto && crypto.getRandomValues) {
      const a = new Uint8Array(16);
      crypto.getRandomValues(a);
      return Array.from(a, (b) => b.toString(16).padStart(2, '0')).join('');
    }
    return String(Math.random()).slice(2) + String(Date.now());
  }

  /* ============================== errors, token, API ============================== */

  class ApiError extends Error {
    constructor(code, message, status) {
      super(message);
      this.code = code;
      this.status = status;
    }
  }

  function errorText(e) {
    if (e instanceof ApiError) return `${e.code}: ${e.message}`;
    return e && e.message ? e.message : String(e);
  }

  let errorKey = null;

  /* Shows e in the banner; a later clearError(key) with the same key hides it (background polls use their
   * own key, so a poll that works again clears its own failure and nothing else). */
  function showError(e, key) {
    errorKey = key || 'action';
    $('error-text').textContent = errorText(e);
    $('error').hidden = false;
  }

  function clearError(key) {
    if (errorKey === key) {
      $('error').hidden = true;
      errorKey = null;
    }
  }

  function token() {
    try {
      return localStorage.getItem(TOKEN_KEY) || '';
    } catch (_) {
      return '';
    }
  }

  function authHeaders() {
    const t = token().trim();
    return t ? {Authorization: 'Bearer ' + t} : {};
  }

  async function errorFrom(status, statusText, bodyText) {
    let code = 'HTTP_' + status, message = statusText || 'HTTP ' + status;
    try {
      const j = JSON.parse(bodyText);
      if (j && j.error) {
        code = j.error.code || code;
        message = j.error.message || message;
      }
    } catch (_) { /* not the JSON envelope: keep the HTTP status */ }
    return new ApiError(code, message, status);
  }

  /* api(path, {method, json, headers, text}) -> the parsed JSON reply (or text with text: true, or null
   * for 204); throws ApiError with the envelope's code and message on a non-2xx reply. POST and DELETE
   * carry the token. */
  async function api(path, opts) {
    opts = opts || {};
    const method = opts.method || 'GET';
    const headers = Object.assign({}, method === 'GET' ? {} : authHeaders(), opts.headers || {});
    const init = {method, headers, cache: 'no-store'};
    if (opts.json !== undefined) {
      init.body = JSON.stringify(opts.json);
      headers['Content-Type'] = 'application/json';
    }
    let res;
    try {
      res = await fetch(API + path, init);
    } catch (e) {
      throw new ApiError('NETWORK', 'cannot reach the server (' + e.message + ')', 0);
    }
    if (!res.ok) throw await errorFrom(res.status, res.statusText, await res.text().catch(() => ''));
    if (res.status === 204) return null;
    if (opts.text) return res.text();
    return res.json();
  }

  /* Posts a FormData with XMLHttpRequest (fetch has no upload progress); resolves with the JSON reply. */
  function postForm(path, form, onProgress) {
    return new Promise((resolve, reject) => {
      const xhr = new XMLHttpRequest();
      xhr.open('POST', API + path);
      for (const [k, v] of Object.entries(authHeaders())) xhr.setRequestHeader(k, v);
      xhr.upload.onprogress = (ev) => { if (ev.lengthComputable && onProgress) onProgress(ev.loaded / ev.total); };
      xhr.onload = async () => {
        if (xhr.status >= 200 && xhr.status < 300) {
          try {
            resolve(JSON.parse(xhr.responseText));
          } catch (e) {
            reject(new ApiError('BAD_REPLY', 'the server replied with something that is not JSON', xhr.status));
          }
        } else {
          reject(await errorFrom(xhr.status, xhr.statusText, xhr.responseText));
        }
      };
      xhr.onerror = () => reject(new ApiError('NETWORK',
        'the upload failed: the connection closed (is the file over the server\'s --max-upload?)', 0));
      xhr.send(form);
    });
  }

  /* ============================== views and routing ============================== */

  /* A view's context: everything it starts is stopped by ctx.close() when the route changes. */
  function newContext() {
    const ctx = {
      alive: true,
      cleanups: [],
      /* Runs fn now and then every ms after it settles, until the view closes. */
      poll(ms, fn, key) {
        let timer = null;
        const tick = async () => {
          timer = null;
          if (!ctx.alive) return;
          try {
            await fn();
            clearError(key);
          } catch (e) {
            if (ctx.alive) showError(e, key);
          }
          if (ctx.alive) timer = setTimeout(tick, ms);
        };
        ctx.cleanups.push(() => clearTimeout(timer));
        tick();
      },
      /* A throttle: ctx.throttle(ms, fn)() runs fn at most once per ms, the last call never lost. */
      throttle(ms, fn, key) {
        let last = 0, timer = null, running = false, again = false;
        const run = async () => {
          timer = null;
          if (!ctx.alive) return;
          if (running) { again = true; return; }
          running = true;
          last = Date.now();
          try {
            await fn();
            clearError(key);
          } catch (e) {
            if (ctx.alive) showError(e, key);
          }
          running = false;
          if (again) { again = false; trigger(); }
        };
        const trigger = () => {
          if (timer || !ctx.alive) return;
          timer = setTimeout(run, Math.max(0, last + ms - Date.now()));
        };
        ctx.cleanups.push(() => clearTimeout(timer));
        return trigger;
      },
      close() {
        ctx.alive = false;
        for (const f of ctx.cleanups.splice(0)) {
          try { f(); } catch (_) { /* a teardown must not stop the others */ }
        }
      }
    };
    return ctx;
  }

  const ROUTES = [
    [/^#?\/?$/, 'runs', viewRuns],
    [/^#\/runs\/?$/, 'runs', viewRuns],
    [/^#\/runs\/([A-Za-z0-9._-]+)$/, 'runs', viewRun],
    [/^#\/compare\/([A-Za-z0-9._,-]+)$/, 'runs', viewCompare],
    [/^#\/sweeps\/?$/, 'sweeps', viewSweeps],
    [/^#\/sweeps\/([A-Za-z0-9._-]+)$/, 'sweeps', viewSweep],
    [/^#\/datasets\/?$/, 'datasets', viewDatasets],
    [/^#\/datasets\/([A-Za-z0-9._-]+)$/, 'datasets', viewDatasets],
    [/^#\/submit$/, 'submit', viewSubmit],
    [/^#\/upload$/, 'upload', viewUpload],
    [/^#\/devices$/, 'devices', viewDevices]
  ];

  let current = null;

  function route() {
    if (current) current.close();
    refreshHealth();
    current = newContext();
    const hash = location.hash || '#/';
    const main = set($('view'));
    window.towerCharts = {};
    for (const [re, nav, fn] of ROUTES) {
      const m = hash.match(re);
      if (!m) continue;
      for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.dataset.view === nav);
      main.dataset.view = fn.name;
      fn(current, main, ...m.slice(1).map(decodeURIComponent));
      return;
    }
    append(main, h('h2', {text: 'Not found'}), h('p', {}, 'No page at ', h('code', {text: hash}), '. ',
      h('a', {href: '#/', text: 'Back to the runs.'})));
  }

  /* ============================== runs list ============================== */

  /* The HParams list (docs/formats.md §3.9), each derived from a run's config: [key, label, value(config, run)]. */
  const HPARAMS = [
    ['optimizer', 'optimizer', (c) => (c.optimizer || {}).type],
    ['learning_rate', 'learning rate', (c) => (c.optimizer || {}).learning_rate],
    ['lr_decay', 'lr decay', (c) => decayText(c.lr_decay)],
    ['batch_size', 'batch', (c) => c.batch_size],
    ['towers', 'towers', (c) => c.towers],
    ['l2', 'l2', (c) => c.l2],
    ['ema_decay', 'EMA decay', (c) => c.ema_decay],
    ['steps', 'steps', (c) => c.steps],
    ['model', 'model', (c) => modelText(c.model)],
    ['dataset', 'dataset', (c, r) => (r.dataset && r.dataset.name) || datasetOf(c)],
    ['seed', 'seed', (c) => c.seed]
  ];
  const hparam = (run, key) => {
    const spec = HPARAMS.find((x) => x[0] === key);
    const v = spec[2](run.config || {}, run);
    return v === undefined ? null : v;
  };
  const datasetOf = (cfg) => (cfg && typeof cfg.dataset === 'object' && cfg.dataset ? cfg.dataset.name : cfg && cfg.dataset);

  function decayText(d) {
    if (!d || !d.type || d.type === 'none') return 'none';
    const warmup = d.warmup_steps ? ' warmup ' + d.warmup_steps : '';
    if (d.type === 'piecewise') {
      return 'piecewise ' + (d.factors || []).map((f, i) => i ? f + '@' + d.boundaries[i - 1] : f).join(',') + warmup;
    }
    return [d.type, d.decay_rate, d.decay_steps, d.alpha ? 'alpha ' + d.alpha : undefined]
      .filter((x) => x !== undefined).join(' ') + (d.staircase ? ' stair' : '') + warmup;
  }

  /* "flatten>dense500relu>dense10": each layer's type with its size and activation. */
  function modelText(model) {
    const layers = (model && model.layers) || [];
    return layers.map((l) => [l.type, l.units || l.filters || '', l.kernel_size ? 'k' + [].concat(l.kernel_size).join('x') : '',
      l.activation && l.activation !== 'linear' ? l.activation : ''].join('')).join('>') || null;
  }

  /* Compares two cell values for sorting: numbers as numbers, missing last, the rest as text. */
  function compareValues(a, b) {
    if (a === null || a === undefined) return b === null || b === undefined ? 0 : 1;
    if (b === null || b === undefined) return -1;
    if (isNum(a) && isNum(b)) return a - b;
    return String(a).localeCompare(String(b), 'en', {numeric: true});
  }

  /* A header cell that sorts by `key` on click; state = {key, dir} is shared by the table's headers. */
  function sortHeader(label, key, state, onSort, id) {
    const th = h('th', {class: 'sortable', id, 'data-sort': key, tabindex: '0', title: 'sort',
      onclick: () => {
        state.dir = state.key === key ? -state.dir : 1;
        state.key = key;
        onSort();
      }}, label);
    th.classList.toggle('sorted-asc', state.key === key && state.dir > 0);
    th.classList.toggle('sorted-desc', state.key === key && state.dir < 0);
    return th;
  }

  function markSorted(thead, state) {
    for (const th of thead.querySelectorAll('th[data-sort]')) {
      th.classList.toggle('sorted-asc', th.dataset.sort === state.key && state.dir > 0);
      th.classList.toggle('sorted-desc', th.dataset.sort === state.key && state.dir < 0);
    }
  }

  /* The runs table's columns: [key, header, sort value(run)]. */
  const RUN_COLUMNS = [
    ['name', 'Run', (r) => r.name || r.id],
    ['status', 'Status', (r) => r.status],
    ['dataset', 'Dataset', (r) => hparam(r, 'dataset')],
    ['optimizer', 'Optimizer', (r) => hparam(r, 'optimizer')],
    ['lr', 'LR', (r) => hparam(r, 'learning_rate')],
    ['batch', 'Batch', (r) => hparam(r, 'batch_size')],
    ['devices', 'Devices', (r) => (r.devices || []).join(',')],
    ['progress', 'Progress', (r) => (r.steps ? r.step / r.steps : null)],
    ['rate', 'Step/s', (r) => stepsPerSec(r)],
    ['loss', 'Loss', (r) => (r.metrics || {}).loss],
    ['acc', 'EMA accuracy', (r) => (r.metrics || {}).eval_accuracy_ema],
    ['created', 'Created', (r) => r.created],
    ['time', 'Elapsed / ETA', (r) => elapsed(r)]
  ];

  const picked = new Set(); /* runs ticked for the compare view; kept across visits of the runs table */
  /* Each listed run's config (the list leaves configs out: GET /runs/{id} has it), fetched once per run for
   * the hparam columns: id -> config, or null while its request is out. What those columns show never
   * changes (a resume changes only the config's steps). */
  const configs = new Map();

  function viewRuns(ctx, main) {
    const filter = h('select', {id: 'runs-filter', 'aria-label': 'status filter'},
      h('option', {value: '', text: 'all'}), STATUSES.map((s) => h('option', {value: s, text: s})));
    const search = h('input', {id: 'runs-search', type: 'search', placeholder: 'name, status or dataset',
      'aria-label': 'filter runs', autocomplete: 'off'});
    const compare = h('button', {type: 'button', id: 'runs-compare', text: 'Compare',
      onclick: () => { location.hash = '#/compare/' + Array.from(picked).join(','); }});
    const total = h('span', {id: 'runs-total', class: 'muted'});
    const body = h('tbody', {id: 'runs-body'});
    const empty = h('p', {id: 'runs-empty', class: 'muted', hidden: true}, 'No runs yet. ',
      h('a', {href: '#/submit', text: 'Submit one.'}));
    const sort = {key: 'created', dir: -1};
    const thead = h('thead', {}, h('tr', {}, h('th', {class: 'col-pick'}),
      RUN_COLUMNS.map(([k, t]) => sortHeader(t, k, sort, () => render(), `runs-sort-${k}`)), h('th')));
    append(main,
      h('div', {class: 'title-row'}, h('h2', {text: 'Runs'}), h('label', {}, 'Status ', filter), search, compare, total,
        h('a', {href: '#/submit', class: 'button', id: 'runs-new', text: 'New run'})),
      h('div', {class: 'table-wrap'}, h('table', {id: 'runs-table', class: 'grid'}, thead, body)),
      empty);
    const rows = new Map();
    let shown = [];

    function showPicked() {
      compare.disabled = picked.size < 1;
      compare.textContent = picked.size ? `Compare (${picked.size})` : 'Compare';
    }

    function row(run) {
      let r = rows.get(run.id);
      if (!r) {
        const cancel = h('button', {type: 'button', id: `cancel-${run.id}`, class: 'small danger', text: 'Cancel',
          onclick: () => cancelRun(run.id, refresh)});
        const del = h('button', {type: 'button', id: `delete-${run.id}`, class: 'small', text: 'Delete',
          onclick: () => deleteRun(run.id, refresh)});
        const pick = h('input', {type: 'checkbox', id: `pick-${run.id}`, 'aria-label': `compare ${run.id}`,
          checked: picked.has(run.id),
          onchange: () => { if (pick.checked) picked.add(run.id); else picked.delete(run.id); showPicked(); }});
        const cells = {};
        const tr = h('tr', {id: `run-row-${run.id}`}, h('td', {class: 'col-pick'}, pick),
          RUN_COLUMNS.map(([k]) => {
            cells[k] = h('td', {class: `col-${k}`});
            return cells[k];
          }),
          h('td', {class: 'col-actions'}, cancel, del));
        r = {tr, cells, cancel, del};
        rows.set(run.id, r);
      }
      const c = r.cells, m = run.metrics || {};
      r.tr.dataset.status = run.status;
      set(c.name, h('a', {href: `#/runs/${run.id}`, id: `run-link-${run.id}`, text: run.name || run.id}),
        h('div', {class: 'id', text: run.id}));
      set(c.status, statusBadge(run.status, run.reason));
      set(c.dataset, run.dataset ? h('a', {href: `#/datasets/${run.dataset.id}`, text: run.dataset.name || run.dataset.id}) : '—');
      set(c.optimizer, hparam(run, 'optimizer') || '—');
      set(c.lr, fmtNum(hparam(run, 'learning_rate'), 6));
      set(c.batch, fmtInt(hparam(run, 'batch_size')));
      set(c.devices, (run.devices || []).join(', ') || '—');
      set(c.progress, progressBar(run.step, run.steps));
      /* steps/s from examples/s and the batch; else from the step count between two polls */
      const now = Date.now() / 1000;
      let rate = stepsPerSec(run);
      if (rate === null && run.status === 'running' && r.last && run.step > r.last.step) {
        rate = (run.step - r.last.step) / (now - r.last.t);
      }
      if (!r.last || run.step !== r.last.step) r.last = {step: run.step, t: now};
      set(c.rate, fmtNum(rate, 0));
      set(c.loss, fmtNum(m.loss));
      set(c.acc, fmtPct(m.eval_accuracy_ema));
      set(c.created, fmtTime(run.created));
      set(c.time, elapsedEta(run));
      const done = TERMINAL.includes(run.status);
      r.cancel.hidden = done || run.status === 'cancelling';
      r.del.hidden = !done;
      return r.tr;
    }

    /* Lays out the last reply: filtered by the search box, sorted by the chosen column. */
    function render() {
      const q = search.value.trim().toLowerCase();
      const match = (run) => !q || [run.name, run.id, run.status, hparam(run, 'dataset')]
        .some((v) => v && String(v).toLowerCase().includes(q));
      const value = RUN_COLUMNS.find((x) => x[0] === sort.key)[2];
      const order = shown.filter(match).sort((a, b) => sort.dir * compareValues(value(a), value(b)));
      const visible = new Set(order.map((run) => run.id));
      for (const run of order) body.appendChild(row(run));
      for (const [id, r] of rows) if (!visible.has(id)) r.tr.remove();
      markSorted(thead, sort);
    }

    /* Gives each shown run its config: from the cache, else asked once, and the table laid out again when
     * it comes (a run deleted meanwhile is asked again only if listed again). */
    function withConfigs() {
      for (const run of shown) {
        if (configs.get(run.id)) run.config = configs.get(run.id);
        if (configs.has(run.id)) continue;
        configs.set(run.id, null);
        api(`/runs/${encodeURIComponent(run.id)}`).then((full) => {
          configs.set(run.id, full.config || {});
          if (!ctx.alive) return;
          for (const x of shown) if (x.id === run.id) x.config = configs.get(run.id);
          render();
        }).catch(() => configs.delete(run.id));
      }
    }

    async function refresh() {
      const q = filter.value ? `&status=${encodeURIComponent(filter.value)}` : '';
      const reply = await api(`/runs?limit=50${q}`);
      if (!ctx.alive) return;
      shown = reply.runs;
      withConfigs();
      const seen = new Set(shown.map((run) => run.id));
      for (const id of rows.keys()) if (!seen.has(id)) rows.delete(id);
      if (!filter.value && reply.total <= shown.length) { /* the whole list: forget ticked runs that are gone */
        for (const id of picked) if (!seen.has(id)) picked.delete(id);
        showPicked();
      }
      render();
      empty.hidden = reply.runs.length > 0;
      total.textContent = reply.total > reply.runs.length ? `${reply.runs.length} of ${reply.total}` : `${reply.total} total`;
    }
    filter.addEventListener('change', () => refresh().catch((e) => showError(e)));
    search.addEventListener('input', render);
    showPicked();
    ctx.poll(2000, refresh, 'runs');
  }

  /* ============================== compare ============================== */

  /* The compare charts: one per metric, one dataset per run; each metric's candidate tags, the first found. */
  const COMPARE_CHARTS = [
    {key: 'loss', title: 'Loss', tags: ['loss']},
    {key: 'accuracy', title: 'Eval accuracy (raw)', tags: ['eval/accuracy']},
    {key: 'accuracy_ema', title: 'Eval accuracy (EMA)', tags: ['eval/accuracy_ema']},
    {key: 'eval_loss', title: 'Eval loss', tags: ['eval/loss']}
  ];
  const lastValue = (scalars, tags) => {
    for (const t of tags) {
      const s = scalars[t];
      if (s && s.length) return s[s.length - 1][1];
    }
    return null;
  };
  const firstSeries = (scalars, tags) => seriesOf(scalars, tags.find((t) => scalars[t]) || tags[0]);

  function viewCompare(ctx, main, ids) {
    const list = ids.split(',').filter(Boolean);
    const differs = h('input', {type: 'checkbox', id: 'compare-differs', checked: true});
    const table = h('table', {id: 'compare-table', class: 'grid'});
    const charts = h('div', {id: 'compare-charts', class: 'charts'});
    append(main,
      h('p', {class: 'crumbs'}, h('a', {href: '#/', text: 'Runs'}), ' / compare'),
      h('h2', {text: `Compare ${list.length} runs`}),
      h('div', {class: 'title-row'}, h('label', {}, differs, ' only what differs')),
      h('div', {class: 'table-wrap'}, table),
      h('h3', {text: 'Metrics'}), charts);
    const chartOf = {};
    if (hasChart) {
      charts.before(chartControls(() => chartOf));
      for (const spec of COMPARE_CHARTS) {
        const cspec = {series: list.map((id) => [id, id])};
        const [figure, canvas] = chartFigure(`compare-chart-${spec.key}`, spec.title, cspec);
        charts.appendChild(figure);
        chartOf[spec.key] = makeChart(canvas, cspec);
      }
      window.towerCharts = chartOf;
      ctx.cleanups.push(() => { for (const c of Object.values(chartOf)) c.destroy(); });
    } else {
      charts.appendChild(h('p', {class: 'muted', text: 'Chart.js is not available: final metrics in the table above.'}));
    }
    const sort = {key: 'name', dir: 1};
    let runs = [], settled = false; /* settled: every run finished, nothing more to fetch */

    function render() {
      const cols = HPARAMS.filter(([k]) => !differs.checked || runs.length < 2 ||
        new Set(runs.map((x) => JSON.stringify(hparam(x.run, k)))).size > 1)
        .map(([k, label]) => [k, label, (x) => hparam(x.run, k), (v) => (isNum(v) ? String(v) : v || '—')]);
      const metricCols = COMPARE_CHARTS.map((spec) => [`final_${spec.key}`, `final ${spec.title.toLowerCase()}`,
        (x) => lastValue(x.scalars, spec.tags), (v) => (spec.key.startsWith('accuracy') ? fmtPct(v) : fmtNum(v))]);
      const all = [['name', 'run', (x) => x.run.name || x.run.id, (v) => v], ['status', 'status', (x) => x.run.status, (v) => v],
        ['step', 'step', (x) => x.run.step, fmtInt]];
      all.splice(1, 0, ...metricCols); /* the final metrics next to the names: what the page is for */
      all.push(...cols);
      const spec = all.find((c) => c[0] === sort.key) || all[0];
      const sorted = runs.slice().sort((a, b) => sort.dir * compareValues(spec[2](a), spec[2](b)));
      /* each final metric's best value (highest accuracy, lowest loss), marked when runs differ in it */
      const best = {};
      for (const [k, , v] of metricCols) {
        const vals = runs.map(v).filter(isNum);
        if (new Set(vals).size > 1) best[k] = k.startsWith('final_accuracy') ? Math.max(...vals) : Math.min(...vals);
      }
      const cell = (x, k, v, f) => {
        const isBest = k in best && v(x) === best[k];
        return h('td', {class: `col-${k}${isBest ? ' best' : ''}`, title: isBest ? 'the best of these runs' : null},
          k === 'name' ? h('a', {href: `#/runs/${x.run.id}`, text: f(v(x))}) : f(v(x)), isBest ? ' ★' : null);
      };
      set(table, h('thead', {}, h('tr', {}, all.map(([k, label]) => sortHeader(label, k, sort, render, `compare-sort-${k}`)))),
        h('tbody', {}, sorted.map((x) => h('tr', {id: `compare-row-${x.run.id}`}, all.map(([k, , v, f]) => cell(x, k, v, f))))));
    }

    async function load() {
      if (settled) return;
      runs = await Promise.all(list.map(async (id) => {
        const [run, m] = await Promise.all([api(`/runs/${encodeURIComponent(id)}`), api(`/runs/${encodeURIComponent(id)}/metrics`)]);
        return {run, scalars: (m && m.scalars) || {}};
      }));
      if (!ctx.alive) return;
      render();
      if (hasChart) {
        for (const spec of COMPARE_CHARTS) {
          const chart = chartOf[spec.key];
          runs.forEach((x, i) => {
            chart.data.datasets[i].label = x.run.name || x.run.id;
            window.TowerCharts.setSeries(chart, i, thin(firstSeries(x.scalars, spec.tags)));
          });
          chart.update('none');
        }
      }
      settled = runs.every((x) => TERMINAL.includes(x.run.status));
    }
    differs.addEventListener('change', render);
    ctx.poll(5000, load, 'compare');
  }

  async function cancelRun(id, after) {
    try {
      await api(`/runs/${id}/cancel`, {method: 'POST'});
      clearError('action');
    } catch (e) {
      showError(e);
    }
    if (after) await after().catch(() => {});
  }

  /* Resumes a stopped run; a succeeded one asks for its new total of steps. */
  async function resumeRun(run, after) {
    let body = {};
    if (run.status === 'succeeded') {
      const answer = window.prompt(`Train ${run.name || run.id} up to how many steps in all?`, String(2 * (run.steps || 0)));
      if (answer === null) return;
      body = {steps: Number(answer)};
    }
    try {
      await api(`/runs/${run.id}/resume`, {method: 'POST', json: body});
      clearError('action');
    } catch (e) {
      showError(e);
    }
    if (after) await after().catch(() => {});
  }

  async function deleteRun(id, after) {
    if (!window.confirm(`Delete run ${id} and its files?`)) return;
    try {
      await api(`/runs/${id}`, {method: 'DELETE'});
      clearError('action');
    } catch (e) {
      showError(e);
    }
    if (after) await after().catch(() => {});
  }

  /* Opens the submit form on a fine-tune of run (its config, init_from its latest checkpoint's EMA weights):
   * the run page's "Fine-tune from this run" and a sweep's best trial. */
  function fineTune(run) {
    openSubmit(run, 'ft', (cfg) => {
      cfg.init_from = {run: run.id, checkpoint: 'latest', weights: 'ema'};
    });
  }

  /* The latest checkpoint of run `id` (reply: GET /runs/{id}/checkpoints, with a latest) to download, and its
   * exports (GET /runs/{id}/export, docs/formats.md §7.3, §7.4) as a TF checkpoint (Tower's names, or the
   * seed program's: names=seed) or ONNX; the download link
   * gets the id linkId. The run page's "Checkpoint" and a sweep's best trial. */
  function checkpointLinks(id, reply, linkId) {
    const step = reply.latest;
    const latest = (reply.checkpoints || []).find((c) => c.step === step);
    const exportLink = (format, text, file) => h('a', {class: 'run-export',
      href: `${API}/runs/${id}/export?format=${format}&step=${step}`, download: file, text});
    return [h('a', {id: linkId, href: `${API}/runs/${id}/checkpoints/latest`,
      download: `${id}-step${step}.safetensors`, text: `Download step ${fmtInt(step)}`}),
    latest ? ` (${fmtBytes(latest.bytes)}, ${(reply.checkpoints || []).length} kept)` : '',
    ' · export: ', exportLink('tf', 'TensorFlow', `model.ckpt-${step}.tar`), ' · ',
    exportLink('tf&names=seed', 'TensorFlow (the seed\'s names)', `model.ckpt-${step}-seed.tar`), ' · ',
    exportLink('onnx&weights=ema', 'ONNX (EMA)', `model-${step}-ema.onnx`), ' · ',
    exportLink('onnx&weights=raw', 'ONNX (raw)', `model-${step}-raw.onnx`)];
  }

  /* ============================== one run ============================== */

  const CHARTS = [
    {key: 'loss', title: 'Loss', series: [['loss', 'loss']]},
    {key: 'accuracy', title: 'Eval accuracy (raw vs EMA)', dashed: true,
      series: [['eval/accuracy', 'raw'], ['eval/accuracy_ema', 'EMA']]},
    {key: 'eval_loss', title: 'Eval loss (raw vs EMA)', dashed: true, series: [['eval/loss', 'raw'], ['eval/loss_ema', 'EMA']]},
    {key: 'lr', title: 'Learning rate', series: [['learning_rate', 'learning rate']]},
    {key: 'throughput', title: 'Examples / s', series: [['examples_per_sec', 'examples/s']]}
  ];

  /* A chart's figure: caption, canvas, the hover readout (charts.js) and a hint; spec.readout is set. */
  function chartFigure(id, title, spec) {
    const canvas = h('canvas', {id, 'aria-label': title, role: 'img'});
    spec.readout = h('div', {class: 'readout', id: `${id}-readout`});
    return [h('figure', {class: 'chart'}, h('figcaption', {text: title}), h('div', {class: 'chart-box'}, canvas), spec.readout), canvas];
  }

  /* The controls every chart of a view shares (TowerCharts.view): step 0, smoothing, log scale. */
  function chartControls(charts) {
    const v = window.TowerCharts.view;
    const redraw = () => window.TowerCharts.redraw(charts());
    const skip = h('input', {type: 'checkbox', id: 'chart-skip0', checked: v.skip0,
      onchange: () => { v.skip0 = skip.checked; redraw(); }});
    const log = h('input', {type: 'checkbox', id: 'chart-log', checked: v.log, onchange: () => { v.log = log.checked; redraw(); }});
    const out = h('span', {id: 'chart-smoothing-value', text: String(v.smoothing)});
    const slider = h('input', {type: 'range', id: 'chart-smoothing', min: '0', max: '0.99', step: '0.01', value: String(v.smoothing),
      oninput: () => { v.smoothing = Number(slider.value); out.textContent = slider.value; redraw(); }});
    return h('div', {class: 'chart-controls', id: 'chart-controls'},
      h('label', {}, skip, ' skip step 0'), h('label', {}, log, ' log scale'),
      h('label', {}, 'smoothing ', slider, ' ', out),
      h('span', {class: 'muted', text: 'drag across a chart to zoom, double-click to reset'}));
  }

  function makeChart(canvas, spec) {
    const chart = new window.Chart(canvas, {
      type: 'line',
      data: {
        datasets: spec.series.map(([, label], i) => ({
          label, data: [], borderColor: COLORS[i % COLORS.length], backgroundColor: COLORS[i % COLORS.length],
          borderWidth: 1.5, borderDash: spec.dashed && i ? [6, 3] : undefined, order: -i,
          pointRadius: (c) => (c.dataset.data.length < 60 ? 2 : 0), tension: 0, spanGaps: true
        }))
      },
      options: {
        animation: false,
        responsive: true,
        maintainAspectRatio: false,
        parsing: false,
        normalized: true,
        interaction: {mode: 'nearest', axis: 'x', intersect: false},
        events: ['mousemove', 'mouseout', 'mousedown', 'mouseup', 'dblclick'],
        scales: {
          x: {type: 'linear', min: 0, title: {display: true, text: 'step'}, ticks: {maxTicksLimit: 8}},
          y: {type: window.TowerCharts.view.log ? 'logarithmic' : 'linear', ticks: {maxTicksLimit: 6}}
        },
        plugins: {legend: {display: spec.series.length > 1, labels: {sort: (x, y) => x.datasetIndex - y.datasetIndex}},
          title: {display: false}, tooltip: {enabled: false}}
      },
      plugins: [window.TowerCharts.plugin]
    });
    chart.$towerReadout = spec.readout; /* charts.js's hover readout */
    return chart;
  }

  /* At most MAX_CHART_POINTS points, evenly thinned, always with the last one. */
  function thin(points) {
    if (points.length <= MAX_CHART_POINTS) return points;
    const k = points.length / MAX_CHART_POINTS, out = [];
    for (let i = 0; i < MAX_CHART_POINTS - 1; i++) out.push(points[Math.floor(i * k)]);
    out.push(points[points.length - 1]);
    return out;
  }

  function seriesOf(scalars, tag) {
    return (scalars[tag] || []).filter((p) => Array.isArray(p) && isNum(p[0]))
      .map((p) => ({x: p[0], y: isNum(p[1]) ? p[1] : null}));
  }

  function metricsTable(scalars, tableBody) {
    const cols = [['loss', fmtNum], ['learning_rate', (x) => fmtNum(x, 6)], ['examples_per_sec', (x) => fmtNum(x, 0)],
      ['eval/accuracy', fmtPct], ['eval/accuracy_ema', fmtPct], ['eval/loss', fmtNum]];
    const bySteps = new Map();
    cols.forEach(([tag], i) => {
      for (const p of scalars[tag] || []) {
        if (!bySteps.has(p[0])) bySteps.set(p[0], new Array(cols.length).fill(null));
        bySteps.get(p[0])[i] = p[1];
      }
    });
    const steps = Array.from(bySteps.keys()).sort((a, b) => b - a).slice(0, 500);
    set(tableBody, steps.map((s) => h('tr', {},
      h('td', {text: fmtInt(s)}), cols.map(([, f], i) => h('td', {text: f(bySteps.get(s)[i])})))));
    return bySteps.size;
  }

  /* DIGITS' "classify one image": drop or choose a PNG or JPEG, POST it as a data: URL in
   * {"inputs": [...]} to /runs/{id}/predict (the latest checkpoint, the run's default weights) and show the
   * top 5 with bars. Errors (an image of another size, a run without a checkpoint) show in the box. */
  function classifyBox(id) {
    const result = h('div', {id: 'classify-result', class: 'classify-result'});
    const preview = h('img', {id: 'classify-preview', class: 'classify-preview', alt: '', hidden: true});
    const input = h('input', {type: 'file', id: 'classify-file', accept: 'image/png,image/jpeg',
      onchange: () => input.files[0] && classify(input.files[0])});
    const drop = h('div', {id: 'classify-drop', class: 'classify-drop'},
      h('label', {for: 'classify-file'}, 'Drop a PNG or JPEG here, or ', h('span', {class: 'link', text: 'choose one'})),
      input, preview);
    drop.addEventListener('dragover', (ev) => { ev.preventDefault(); drop.classList.add('over'); });
    drop.addEventListener('dragleave', () => drop.classList.remove('over'));
    drop.addEventListener('drop', (ev) => {
      ev.preventDefault();
      drop.classList.remove('over');
      if (ev.dataTransfer.files[0]) classify(ev.dataTransfer.files[0]);
    });

    async function classify(file) {
      const url = await new Promise((resolve, reject) => {
        const reader = new FileReader();
        reader.onload = () => resolve(reader.result);
        reader.onerror = () => reject(reader.error);
        reader.readAsDataURL(file);
      });
      preview.src = url;
      preview.hidden = false;
      set(result, h('p', {class: 'muted', text: `classifying ${file.name}…`}));
      try {
        const reply = await api(`/runs/${id}/predict?top_k=5`, {method: 'POST', json: {inputs: [url]}});
        const p = reply.predictions[0];
        set(result, h('p', {class: 'muted', text: `${file.name} · step ${fmtInt(reply.checkpoint.step)}, ${reply.weights} weights`}),
          p.top_k ? p.top_k.map((c) => h('div', {class: 'classify-row'},
            h('span', {class: 'classify-label', text: c.name || `class ${c.class}`}),
            h('span', {class: 'classify-bar'}, h('span', {class: 'bar', style: `width: ${(100 * c.probability).toFixed(1)}%`})),
            h('span', {class: 'classify-pct', text: fmtPct(c.probability)})))
            : h('pre', {class: 'json', text: pretty(p.outputs)}));
      } catch (e) {
        set(result, h('p', {id: 'classify-error', class: 'banner error', text: errorText(e)}));
      }
    }
    return h('div', {id: 'classify'}, drop, result);
  }

  /* Where a queued run stands: "#2 · expected to start 14:05 · dataset x is converting". */
  function queueText(r) {
    return [`#${r.queue_position}`, isNum(r.expected_start) ? `expected to start ${fmtTime(r.expected_start)}` : null,
      r.waiting_for].filter(Boolean).join(' · ');
  }

  /* A running run's resources (CPU %, RSS, GPU when known) on one line. */
  function resourcesText(u) {
    const gpu = isNum(u.gpu_utilization_percent)
      ? ` · GPU ${fmtNum(u.gpu_utilization_percent, 0)}% ${fmtBytes(u.gpu_memory_bytes)}` : '';
    return `CPU ${fmtNum(u.cpu_percent, 0)}% · memory ${fmtBytes(u.rss_bytes)}${gpu}`;
  }

  /* Every start of the run's trainer: when, how long, the steps it covered and why it ended. */
  function attemptsTable(attempts) {
    if (!attempts.length) return null;
    const now = Date.now() / 1000;
    return h('table', {id: 'run-attempts', class: 'grid'},
      h('thead', {}, h('tr', {}, ['attempt', 'started', 'ended', 'time', 'steps', 'ended because'].map(
        (t) => h('th', {text: t})))),
      h('tbody', {}, attempts.map((a) => h('tr', {},
        h('td', {text: String(a.attempt)}), h('td', {text: fmtTime(a.started)}),
        h('td', {text: isNum(a.ended) ? fmtTime(a.ended) : 'running'}),
        h('td', {text: fmtDuration((isNum(a.ended) ? a.ended : now) - a.started)}),
        h('td', {text: `${fmtInt(a.step_start)} → ${isNum(a.step_end) ? fmtInt(a.step_end) : '…'}`}),
        h('td', {text: a.reason || '—'})))));
  }

  function viewRun(ctx, main, id) {
    const el = {};
    const mk = (name, tag, props, ...kids) => (el[name] = h(tag, props, ...kids));
    append(main,
      h('p', {class: 'crumbs'}, h('a', {href: '#/', text: 'Runs'}), ' / ', h('span', {class: 'id', text: id})),
      h('div', {class: 'title-row'},
        mk('name', 'h2', {id: 'run-name', text: id}),
        mk('status', 'span', {id: 'run-status'}),
        mk('cancel', 'button', {type: 'button', id: 'run-cancel', class: 'danger', text: 'Cancel', hidden: true,
          onclick: () => cancelRun(id, loadRun)}),
        mk('del', 'button', {type: 'button', id: 'run-delete', text: 'Delete', hidden: true,
          onclick: () => deleteRun(id, async () => { location.hash = '#/'; })}),
        mk('resume', 'button', {type: 'button', id: 'run-resume', text: 'Resume', hidden: true,
          onclick: () => resumeRun(run, loadRun)}),
        mk('clone', 'button', {type: 'button', id: 'run-clone', text: 'Clone', hidden: true,
          onclick: () => openSubmit(run, 'clone', () => {})}),
        mk('finetune', 'button', {type: 'button', id: 'run-finetune', text: 'Fine-tune from this run', hidden: true,
          onclick: () => fineTune(run)})),
      mk('progress', 'div', {id: 'run-progress-wrap'}),
      mk('error', 'p', {id: 'run-error', class: 'banner error', hidden: true}),
      mk('facts', 'dl', {id: 'run-facts', class: 'facts'}),
      mk('attempts', 'div', {id: 'run-attempts-wrap', class: 'table-wrap'}),
      h('h3', {text: 'Metrics'}),
      mk('metricsNote', 'p', {id: 'metrics-note', class: 'muted'}),
      mk('charts', 'div', {id: 'charts', class: 'charts'}),
      h('h3', {text: 'Evaluation'}),
      mk('evaluation', 'div', {id: 'run-evaluation', class: 'evaluation muted', text: 'no evaluation yet'}),
      h('div', {class: 'two-col'},
        h('section', {},
          h('h3', {text: 'TensorBoard'}),
          mk('tbLink', 'p', {id: 'run-tensorboard-link-wrap', hidden: true}),
          h('div', {class: 'copy-row'}, mk('tb', 'pre', {id: 'run-tensorboard', class: 'cmd'}),
            h('button', {type: 'button', id: 'run-tensorboard-copy', class: 'small', text: 'Copy',
              onclick: () => copyText(el.tb.textContent)})),
          h('h3', {text: 'Checkpoint'}),
          mk('ckpt', 'p', {id: 'run-checkpoint-wrap', class: 'muted', text: 'none yet'}),
          h('h3', {text: 'Classify an image'}),
          classifyBox(id),
          h('h3', {text: 'Config'}),
          mk('config', 'pre', {id: 'run-config', class: 'json'})),
        h('section', {},
          h('h3', {}, 'Log ', h('span', {class: 'muted small-text', text: '(last 100 lines)'})),
          mk('log', 'pre', {id: 'run-log', class: 'log'}))));

    let run = null, es = null, lastEvent = 0, started = false; /* started: the first load is done */
    const charts = {}, specs = []; /* specs: the charts shown, CHARTS then the picked tags */

    function addChart(spec) {
      const cspec = Object.assign({}, spec);
      const [figure, canvas] = chartFigure(`chart-${spec.key}`, spec.title, cspec);
      el.charts.appendChild(figure);
      charts[spec.key] = makeChart(canvas, cspec);
      specs.push(cspec);
    }

    if (hasChart) {
      /* the picker: any tag of the run (per-class ones too) as a chart of its own */
      el.picker = h('select', {id: 'chart-picker', onchange: () => {
        const tag = el.picker.value;
        el.picker.value = '';
        if (tag && !specs.some((x) => x.key === `tag-${tag}`)) {
          addChart({key: `tag-${tag}`, title: tag, series: [[tag, tag]]});
          loadMetrics().catch(() => {});
        }
      }}, h('option', {value: '', text: 'add a chart of…'}));
      el.charts.before(chartControls(() => charts), h('p', {}, el.picker));
      for (const spec of CHARTS) addChart(spec);
      window.towerCharts = charts;
      ctx.cleanups.push(() => { for (const c of Object.values(charts)) c.destroy(); });
    } else {
      el.metricsBody = h('tbody', {id: 'metrics-body'});
      el.charts.appendChild(h('div', {class: 'table-wrap'}, h('table', {id: 'metrics-table', class: 'grid numeric'},
        h('thead', {}, h('tr', {}, ['step', 'loss', 'learning rate', 'examples/s', 'eval accuracy',
          'eval accuracy (EMA)', 'eval loss'].map((t) => h('th', {text: t})))), el.metricsBody)));
    }

    function showRun(r) {
      run = r;
      const m = r.metrics || {};
      el.name.textContent = r.name || r.id;
      set(el.status, statusBadge(r.status, r.reason));
      set(el.progress, progressBar(r.step, r.steps, 'run-progress'),
        h('p', {id: 'run-step', class: 'muted'},
          `step ${fmtInt(r.step)} of ${fmtInt(r.steps)} · ${fmtNum(stepsPerSec(r), 0)} steps/s · elapsed ${fmtDuration(elapsed(r))}`,
          r.status === 'running' ? ` · eta ${fmtDuration(r.eta_s)}` : ''));
      const done = TERMINAL.includes(r.status);
      el.cancel.hidden = done || r.status === 'cancelling';
      el.del.hidden = !done;
      el.resume.hidden = !done;
      el.resume.textContent = r.status === 'succeeded' ? 'Train more steps' : 'Resume';
      el.clone.hidden = !r.config;
      el.finetune.hidden = !r.config || !isNum(r.step) || r.step <= 0;
      const err = r.error ? (typeof r.error === 'string' ? r.error : r.error.message || JSON.stringify(r.error)) : '';
      el.error.hidden = !(r.reason || err);
      el.error.textContent = [r.reason, err].filter(Boolean).join(': ');
      const fact = (k, v) => h('div', {}, h('dt', {text: k}), h('dd', {}, v));
      set(el.facts,
        fact('id', h('code', {text: r.id})),
        fact('dataset', r.dataset ? h('a', {href: `#/datasets/${r.dataset.id}`, text: `${r.dataset.name} (${r.dataset.id})`}) : '—'),
        (r.warnings || []).length ? fact('warning', h('span', {id: 'run-warnings', class: 'warning', text: r.warnings.join(' ')})) : null,
        fact('devices', `${(r.devices || []).join(', ') || '—'} · ${r.towers || 1} tower(s)`),
        fact('loss', fmtNum(m.loss)),
        fact('eval accuracy', `${fmtPct(m.eval_accuracy)} raw · ${fmtPct(m.eval_accuracy_ema)} EMA`),
        fact('learning rate', fmtNum(m.learning_rate, 6)),
        fact('examples/s', fmtNum(m.examples_per_sec, 0)),
        fact('created', fmtTime(r.created)),
        fact('started', fmtTime(r.started)),
        fact('finished', fmtTime(r.finished)),
        fact('restarts', `${r.restarts || 0} of ${isNum(r.max_restarts) ? r.max_restarts : '—'}`),
        r.resources ? fact('uses', h('span', {id: 'run-resources', text: resourcesText(r.resources)})) : null,
        isNum(r.queue_position) ? fact('queue', h('span', {id: 'run-queue', text: queueText(r)})) : null,
        fact('logdir', h('code', {text: r.logdir || '—'})));
      set(el.attempts, attemptsTable(r.attempts || []));
      el.tb.textContent = r.tensorboard || (r.logdir ? `tensorboard --logdir ${r.logdir}` : '—');
      el.tbLink.hidden = !r.tensorboard_url;
      if (r.tensorboard_url && !el.tbLink.firstChild) {
        append(el.tbLink, h('a', {id: 'run-tensorboard-link', href: r.tensorboard_url, target: '_blank', rel: 'noopener',
          text: 'Open TensorBoard'}), ` (run ${r.name || r.id})`);
      }
      if (r.config && !el.config.textContent) el.config.textContent = pretty(r.config);
    }

    async function loadMetrics() {
      if (!run || (run.status === 'queued' && !run.step)) return;
      const reply = await api(`/runs/${id}/metrics`);
      if (!ctx.alive) return;
      const scalars = (reply && reply.scalars) || {};
      let n = 0;
      if (hasChart) {
        const tags = Object.keys(scalars).sort();
        if (el.picker.options.length !== tags.length + 1) {
          set(el.picker, h('option', {value: '', text: `add a chart of… (${tags.length} series)`}),
            tags.map((t) => h('option', {value: t, text: t})));
        }
        for (const spec of specs) {
          const chart = charts[spec.key];
          spec.series.forEach(([tag], i) => {
            const pts = thin(seriesOf(scalars, tag));
            window.TowerCharts.setSeries(chart, i, pts);
            n += pts.length;
          });
          chart.update('none');
        }
      } else {
        n = metricsTable(scalars, el.metricsBody);
      }
      el.metricsNote.textContent = n ? `${Object.keys(scalars).length} tags, updated ${new Date().toLocaleTimeString()}` +
        (hasChart ? '' : ' · Chart.js is not available: metrics as a table (newest first)') : 'no metrics yet';
    }

    async function loadLog() {
      if (!run || (run.status === 'queued' && !run.step && !run.restarts)) return;
      const text = await api(`/runs/${id}/log?tail=100`, {text: true});
      if (!ctx.alive) return;
      const atEnd = el.log.scrollTop + el.log.clientHeight >= el.log.scrollHeight - 4;
      el.log.textContent = text || '(empty)';
      if (atEnd) el.log.scrollTop = el.log.scrollHeight;
    }

    async function loadCheckpoints() {
      if (!run || (run.status === 'queued' && !run.step)) return;
      const reply = await api(`/runs/${id}/checkpoints`);
      if (!ctx.alive) return;
      if (reply && reply.latest !== null && reply.latest !== undefined) {
        set(el.ckpt, checkpointLinks(id, reply, 'run-checkpoint'));
        el.ckpt.className = '';
      }
    }

    const evaluation = evaluationPanel(el.evaluation);
    const metricsSoon = ctx.throttle(METRICS_EVERY_MS, async () => {
      await loadMetrics();
      /* only once the run has reported an evaluation (a run without a test split never does) */
      if (ctx.alive && run && (run.metrics || {}).eval_loss != null) await evaluation.load(id);
    }, 'metrics');
    const logSoon = ctx.throttle(LOG_EVERY_MS, loadLog, 'log');
    const ckptSoon = ctx.throttle(10000, loadCheckpoints, 'checkpoints');

    function onRun(r) {
      const before = run;
      showRun(r);
      if (!before || before.step !== r.step || before.status !== r.status) {
        metricsSoon();
        logSoon();
      }
      if (!before || before.status !== r.status || TERMINAL.includes(r.status)) ckptSoon();
      if (TERMINAL.includes(r.status) && es) {
        es.close();
        es = null;
      } else if (!TERMINAL.includes(r.status) && !es && started) {
        openEvents(); /* resumed: follow it again */
      }
    }

    async function loadRun() {
      const r = await api(`/runs/${id}`);
      if (ctx.alive) onRun(r);
    }

    function openEvents() {
      if (!window.EventSource || TERMINAL.includes(run.status)) return;
      const stream = es = new EventSource(`${API}/runs/${id}/events`);
      es.addEventListener('run', (ev) => {
        lastEvent = Date.now();
        try {
          onRun(JSON.parse(ev.data));
        } catch (e) {
          showError(e, 'events');
        }
      });
      ctx.cleanups.push(() => stream.close());
    }

    (async () => {
      try {
        await loadRun();
      } catch (e) {
        if (!ctx.alive) return;
        showError(e, 'run');
        el.name.textContent = e.status === 404 ? `No run ${id}` : id;
        return;
      }
      if (!ctx.alive) return;
      started = true;
      openEvents();
      /* A safety net under SSE: while the run is unfinished and no event came for 4 s (a proxy that buffers,
       * a reconnecting stream), fetch the run; also refreshes elapsed time. */
      ctx.poll(2000, async () => {
        if (!run || TERMINAL.includes(run.status)) return;
        if (Date.now() - lastEvent > 4000) await loadRun();
        else showRun(run);
      }, 'run');
    })();
  }

  /* ============================== evaluation (GET /runs/{id}/evaluation) ============================== */

  /* The run page's evaluation box: a raw/EMA switch, then for a classifier the headline numbers, a
   * confusion-matrix heat map (a table, rows the true class, cell colour by the share of the row) and
   * per-class precision/recall bars; for regression MSE, MAE and R². */
  function evaluationPanel(box) {
    let doc = null, slot = 'ema', lastText = ''; /* the EMA weights first: Tower's answer (README) */
    const pct = (v) => (v === null || v === undefined ? '—' : fmtPct(v));

    function heatMap(m, names) {
      const head = h('tr', {}, h('th', {class: 'corner', text: 'true ↓ predicted →'}),
        names.map((n) => h('th', {text: n})));
      const rows = m.confusion.map((row, i) => {
        const total = row.reduce((a, b) => a + b, 0) || 1;
        return h('tr', {}, h('th', {text: names[i]}), row.map((n, j) => {
          const share = n / total;
          const hue = i === j ? 142 : 0; /* green diagonal, red mistakes */
          return h('td', {class: 'cell', title: `${names[i]} → ${names[j]}: ${n}`, text: String(n),
            style: `background: hsla(${hue}, 70%, 45%, ${Math.min(1, share * 1.5).toFixed(3)})`});
        }));
      });
      return h('table', {id: 'confusion-matrix', class: 'grid numeric heatmap'}, h('thead', {}, head), h('tbody', {}, rows));
    }

    function bars(m, names) {
      const pc = m.per_class;
      const bar = (v, kind) => h('div', {class: `pbar ${kind}`, title: `${kind} ${pct(v)}`},
        h('span', {class: 'fill', style: `width: ${((v || 0) * 100).toFixed(1)}%`}), h('span', {class: 'val', text: pct(v)}));
      return h('table', {id: 'per-class', class: 'grid per-class'},
        h('thead', {}, h('tr', {}, ['class', 'precision', 'recall', 'support'].map((t) => h('th', {text: t})))),
        h('tbody', {}, names.map((n, k) => h('tr', {}, h('th', {text: n}), h('td', {}, bar(pc.precision[k], 'precision')),
          h('td', {}, bar(pc.recall[k], 'recall')), h('td', {class: 'num', text: fmtInt(pc.support[k])})))));
    }

    function render() {
      const m = doc[slot];
      const switcher = h('div', {class: 'switch', role: 'group'}, ['raw', 'ema'].map((w) =>
        h('button', {type: 'button', id: `evaluation-${w}`, class: w === slot ? 'small active' : 'small',
          disabled: !doc[w], text: w === 'raw' ? 'raw weights' : 'EMA weights',
          onclick: () => { slot = w; render(); }})));
      const head = h('p', {id: 'evaluation-head'}, `step ${fmtInt(doc.step)} · ${fmtInt(m.examples)} examples · `,
        doc.kind === 'classification'
          ? `accuracy ${pct(m.accuracy)}${m.top5 !== undefined ? ` · top-5 ${pct(m.top5)}` : ''} · loss ${fmtNum(m.loss)}`
          : `MSE ${fmtNum(m.mse)} · MAE ${fmtNum(m.mae)} · R² ${fmtNum(m.r2)}`);
      box.className = 'evaluation';
      if (doc.kind !== 'classification') {
        set(box, switcher, head);
        return;
      }
      const names = doc.class_names.length === doc.classes ? doc.class_names : m.per_class.recall.map((_, k) => String(k));
      set(box, switcher, head, h('div', {class: 'two-col'},
        h('section', {}, h('h4', {text: 'Confusion matrix'}),
          m.confusion ? h('div', {class: 'table-wrap'}, heatMap(m, names)) : h('p', {class: 'muted', text: 'too many classes to show'})),
        h('section', {}, h('h4', {text: 'Per class'}), h('div', {class: 'table-wrap'}, bars(m, names)))));
    }

    async function load(id) {
      let text;
      try {
        text = await api(`/runs/${id}/evaluation`, {text: true});
      } catch (e) {
        if (e.status !== 404) throw e;
        return;
      }
      if (text === lastText) return;
      lastText = text;
      doc = JSON.parse(text);
      if (!doc[slot]) slot = doc.ema ? 'ema' : 'raw';
      render();
    }
    return {load};
  }

  async function copyText(text) {
    try {
      await navigator.clipboard.writeText(text);
    } catch (_) {
      const ta = h('textarea', {class: 'offscreen'});
      ta.value = text;
      document.body.appendChild(ta);
      ta.select();
      document.execCommand('copy');
      ta.remove();
    }
  }

  /* ============================== sweeps (GET /sweeps, GET /sweeps/{id}) ============================== */

  /* A sweep spec's direction: "maximize" when given, else larger is better for accuracies and R² (as the
   * server decides, server/searcher.c). */
  const sweepMaximize = (spec) => (spec && typeof spec.maximize === 'boolean' ? spec.maximize
    : /accuracy|r2/.test((spec && spec.metric) || ''));
  const metricText = (spec) => `${(spec && spec.metric) || '?'} ${sweepMaximize(spec) ? '↑ max' : '↓ min'}`;

  function searcherText(sw) {
    const sr = (sw.spec && sw.spec.searcher) || {};
    if (sr.type === 'asha') {
      const rungs = (sw.rung_steps || []).length || sr.rungs || 3;
      return `ASHA · η ${sr.reduction_factor || 4} · ${rungs} rungs`;
    }
    return sr.type || '?';
  }

  /* A searched key's range or choice in words: "log-uniform 0.0001 … 1", "[8, 16, 32, 64]". */
  function spaceText(p) {
    if (Array.isArray(p)) return '[' + p.map(valueText).join(', ') + ']';
    if (!p || typeof p !== 'object') return String(p);
    if (p.type === 'choice') return '[' + (p.values || []).map(valueText).join(', ') + ']';
    const kind = p.type === 'log_uniform' ? 'log-uniform' : p.type;
    return `${kind} ${valueText(p.min)} … ${valueText(p.max)}` + (p.count ? ` (${p.count} grid points)` : '');
  }

  /* A trial's value as the page shows it: integers whole, other numbers to 4 significant digits. */
  function valueText(v) {
    if (isNum(v)) return Number.isInteger(v) ? String(v) : String(+v.toPrecision(4));
    return typeof v === 'string' ? v : JSON.stringify(v);
  }

  /* A trial's latest result: {rung, value} of the highest rung with a metric, or null. */
  function lastResult(t) {
    const r = (t && t.results) || [];
    for (let k = r.length - 1; k >= 0; k--) if (isNum(r[k])) return {rung: k, value: r[k]};
    return null;
  }

  /* The trials the sweep runs at most: every trial trained to the top rung is steps_full. */
  function trialsTotal(sw) {
    const top = (sw.rung_steps || [])[(sw.rung_steps || []).length - 1];
    return isNum(sw.steps_full) && top > 0 ? Math.round(sw.steps_full / top) : null;
  }

  /* "512 of 1,024 steps, 50%": the steps the trials trained against every trial trained to the end. */
  function stepsText(sw) {
    if (!isNum(sw.steps_trained) || !isNum(sw.steps_full)) return '—';
    const pct = sw.steps_full > 0 ? Math.round(1000 * sw.steps_trained / sw.steps_full) / 10 : 0;
    return `${fmtInt(sw.steps_trained)} of ${fmtInt(sw.steps_full)} steps, ${pct}%`;
  }

  /* The rung ladder: for rung k, its steps, the trials that reached it (promoted to it or started there) and
   * those that finished it (its result recorded). */
  function rungLadder(sw) {
    const trials = sw.trials || [];
    return (sw.rung_steps || []).map((steps, k) => ({
      rung: k, steps,
      reached: trials.filter((t) => t.rung >= k).length,
      finished: trials.filter((t) => (t.results || []).length > k).length
    }));
  }

  const sweepDetails = new Map(); /* id -> {key, sweep}: each listed sweep's GET /sweeps/{id}, asked again while it runs */

  function viewSweeps(ctx, main) {
    const body = h('tbody', {id: 'sweeps-body'});
    const empty = h('p', {id: 'sweeps-empty', class: 'muted', hidden: true}, 'No sweeps yet. Start one with ',
      h('code', {text: 'POST api/v1/sweeps'}), ' (a base run config, the space to search, a searcher and a metric).');
    append(main,
      h('div', {class: 'title-row'}, h('h2', {text: 'Sweeps'}), h('span', {id: 'sweeps-total', class: 'muted'})),
      h('div', {class: 'table-wrap'}, h('table', {id: 'sweeps-table', class: 'grid'},
        h('thead', {}, h('tr', {}, ['Sweep', 'Status', 'Searcher', 'Metric', 'Trials', 'Best', 'Steps trained', 'Created']
          .map((t) => h('th', {scope: 'col', text: t})))), body)),
      empty);

    async function detail(sw) {
      const key = `${sw.status}:${sw.finished}`;
      const have = sweepDetails.get(sw.id);
      if (have && have.key === key && sw.status !== 'running') return have.sweep;
      const full = await api(`/sweeps/${encodeURIComponent(sw.id)}`);
      sweepDetails.set(sw.id, {key, sweep: full});
      return full;
    }

    function row(sw) {
      const n = sw.trials ? sw.trials.length : null, total = trialsTotal(sw);
      const best = lastResult(sw.best);
      return h('tr', {id: `sweep-row-${sw.id}`, 'data-status': sw.status, 'data-name': sw.name},
        h('td', {}, h('a', {href: `#/sweeps/${encodeURIComponent(sw.name)}`, id: `sweep-link-${sw.id}`, text: sw.name}),
          h('div', {class: 'id', text: sw.id})),
        h('td', {}, statusBadge(sw.status)),
        h('td', {class: 'col-searcher', text: searcherText(sw)}),
        h('td', {class: 'col-metric', text: metricText(sw.spec)}),
        h('td', {class: 'col-trials num', 'data-value': n === null ? '' : String(n),
          text: n === null ? '—' : total ? `${fmtInt(n)} of ${fmtInt(total)}` : fmtInt(n)}),
        h('td', {class: 'col-best num', 'data-value': best ? String(best.value) : '', text: best ? fmtNum(best.value) : '—'}),
        h('td', {class: 'col-steps', text: stepsText(sw)}),
        h('td', {class: 'col-created', text: fmtTime(sw.created)}));
    }

    async function refresh() {
      const reply = await api('/sweeps');
      const full = await Promise.all(reply.sweeps.map((sw) => detail(sw).catch(() => sw)));
      if (!ctx.alive) return;
      const seen = new Set(full.map((sw) => sw.id));
      for (const id of sweepDetails.keys()) if (!seen.has(id)) sweepDetails.delete(id);
      set(body, full.map(row));
      empty.hidden = full.length > 0;
      $('sweeps-total').textContent = `${full.length} total`;
    }
    ctx.poll(2000, refresh, 'sweeps');
  }

  /* One sweep: its facts, the best trial (fine-tune, export), the rung ladder, the steps spent, the trials
   * table and a scatter of the metric against each searched key; refreshed every 2 s while anything in it
   * can change. */
  function viewSweep(ctx, main, ref) {
    const el = {};
    const mk = (name, tag, props, ...kids) => (el[name] = h(tag, props, ...kids));
    append(main,
      h('p', {class: 'crumbs'}, h('a', {href: '#/sweeps', text: 'Sweeps'}), ' / ', h('span', {class: 'id', text: ref})),
      h('div', {class: 'title-row'},
        mk('name', 'h2', {id: 'sweep-name', text: ref}),
        mk('status', 'span', {id: 'sweep-status'}),
        mk('cancel', 'button', {type: 'button', id: 'sweep-cancel', class: 'danger', text: 'Cancel', hidden: true,
          onclick: () => act('cancel')}),
        mk('resume', 'button', {type: 'button', id: 'sweep-resume', text: 'Resume', hidden: true,
          onclick: () => act('resume')}),
        mk('del', 'button', {type: 'button', id: 'sweep-delete', text: 'Delete', hidden: true, onclick: () => remove()})),
      mk('facts', 'dl', {id: 'sweep-facts', class: 'facts'}),
      h('h3', {text: 'Best trial'}),
      mk('best', 'div', {id: 'sweep-best', class: 'muted', text: 'no result yet'}),
      h('div', {class: 'two-col'},
        h('section', {},
          h('h3', {text: 'Rungs'}),
          mk('steps', 'p', {id: 'sweep-steps'}),
          h('div', {class: 'table-wrap'}, mk('rungs', 'table', {id: 'sweep-rungs', class: 'grid'}))),
        h('section', {},
          h('h3', {text: 'Spec'}),
          mk('spec', 'pre', {id: 'sweep-spec', class: 'json'}))),
      h('h3', {text: 'Trials'}),
      h('div', {class: 'table-wrap'}, mk('trials', 'table', {id: 'sweep-trials', class: 'grid'})),
      mk('chartsTitle', 'h3', {text: 'Metric by hyperparameter'}),
      mk('charts', 'div', {id: 'sweep-charts', class: 'charts'}));

    let sweep = null, lastText = '', lastFetch = 0, ckptKey = null;
    const charts = {}; /* searched key -> Chart */
    const sort = {key: 'trial', dir: 1};
    ctx.cleanups.push(() => { for (const c of Object.values(charts)) c.destroy(); });
    const settled = () => sweep && sweep.status !== 'running' &&
      (sweep.trials || []).every((t) => TERMINAL.includes(t.run && t.run.status));

    async function act(what) {
      el.cancel.disabled = el.resume.disabled = true;
      try {
        const reply = await api(`/sweeps/${encodeURIComponent(sweep.id)}/${what}`, {method: 'POST'});
        clearError('action');
        if (ctx.alive) show(reply);
      } catch (e) {
        showError(e);
      } finally {
        el.cancel.disabled = el.resume.disabled = false;
      }
      await load(true).catch(() => {});
    }

    async function remove() {
      if (!window.confirm(`Delete sweep ${sweep.name}? Its runs stay.`)) return;
      try {
        await api(`/sweeps/${encodeURIComponent(sweep.id)}`, {method: 'DELETE'});
        clearError('action');
        location.hash = '#/sweeps';
      } catch (e) {
        showError(e);
      }
    }

    function showFacts(sw) {
      const fact = (k, v) => h('div', {}, h('dt', {text: k}), h('dd', {}, v));
      const space = (sw.spec && sw.spec.space) || {};
      set(el.facts,
        fact('id', h('code', {text: sw.id})),
        fact('searcher', h('span', {id: 'sweep-searcher', text: searcherText(sw)})),
        fact('metric', h('span', {id: 'sweep-metric', text: metricText(sw.spec)})),
        fact('trials', h('span', {id: 'sweep-trials-count', text: `${fmtInt((sw.trials || []).length)} of ${fmtInt(trialsTotal(sw))}`})),
        Object.entries(space).map(([k, p]) => fact(k, h('span', {class: 'sweep-space', text: spaceText(p)}))),
        fact('dataset', datasetOf(sw.config) || '—'),
        fact('created', fmtTime(sw.created)),
        fact('finished', fmtTime(sw.finished)));
    }

    function showBest(sw) {
      const b = sw.best, res = lastResult(b);
      if (!b || !res) {
        el.best.className = 'muted';
        set(el.best, 'no result yet');
        ckptKey = null;
        return;
      }
      el.best.className = 'best-trial';
      const steps = (sw.rung_steps || [])[res.rung];
      const ckpt = h('span', {id: 'sweep-best-checkpoint-wrap', class: 'muted', text: 'checkpoint: none yet'});
      set(el.best,
        h('p', {id: 'sweep-best-text', 'data-trial': String(b.trial)}, h('span', {class: 'best-mark', 'aria-hidden': 'true', text: '★ '}),
          `trial ${b.trial} · `, h('a', {href: `#/runs/${b.run.id}`, id: 'sweep-best-run', text: b.run.name || b.run.id}),
          ` · ${sw.spec.metric} ${fmtNum(res.value)} after ${fmtInt(steps)} steps · `,
          Object.entries(b.values || {}).map(([k, v], i) => [i ? ', ' : '', h('code', {text: k}), ' = ', valueText(v)])),
        h('div', {class: 'actions-row'},
          h('button', {type: 'button', id: 'sweep-best-finetune', text: 'Fine-tune',
            title: 'open the submit form on this trial\'s config, initialised from its latest checkpoint',
            onclick: async () => {
              try {
                fineTune(await api(`/runs/${encodeURIComponent(b.run.id)}`));
              } catch (e) {
                showError(e);
              }
            }}),
          h('span', {id: 'sweep-best-export'}, ckpt)));
      /* its checkpoints: asked again when the best trial or its run's step changes */
      const key = `${b.run.id}:${b.run.step}:${b.run.status}`;
      const before = ckptKey;
      ckptKey = key;
      if (before === key && el.bestCkpt) {
        set(ckpt, ...el.bestCkpt);
        ckpt.className = '';
        return;
      }
      el.bestCkpt = null;
      api(`/runs/${encodeURIComponent(b.run.id)}/checkpoints`).then((reply) => {
        if (!ctx.alive || ckptKey !== key || !reply || reply.latest === null || reply.latest === undefined) return;
        el.bestCkpt = checkpointLinks(b.run.id, reply, 'sweep-best-checkpoint');
        const wrap = $('sweep-best-checkpoint-wrap');
        if (wrap) {
          set(wrap, ...el.bestCkpt);
          wrap.className = '';
        }
      }).catch(() => {});
    }

    function showRungs(sw) {
      const ladder = rungLadder(sw), n = Math.max(1, (sw.trials || []).length);
      set(el.rungs, h('thead', {}, h('tr', {}, ['rung', 'steps', 'reached', 'finished', ''].map((t) => h('th', {scope: 'col', text: t})))),
        h('tbody', {}, ladder.map((r) => {
          const bar = h('div', {class: 'hbar'});
          bar.style.width = (r.reached ? 100 * r.finished / r.reached : 0).toFixed(1) + '%';
          const reached = h('div', {class: 'hbar hbar-reached'}, bar);
          reached.style.width = (100 * r.reached / n).toFixed(1) + '%';
          return h('tr', {id: `sweep-rung-${r.rung}`},
            h('td', {text: String(r.rung)}), h('td', {class: 'num col-steps', text: fmtInt(r.steps)}),
            h('td', {class: 'num col-reached', text: fmtInt(r.reached)}),
            h('td', {class: 'num col-finished', text: fmtInt(r.finished)}),
            h('td', {class: 'bar-cell', title: `${r.finished} of ${r.reached} finished`}, reached));
        })));
      el.steps.textContent = stepsText(sw);
    }

    function showTrials(sw) {
      const keys = Object.keys((sw.spec && sw.spec.space) || {});
      const rungs = sw.rung_steps || [];
      const bestTrial = sw.best ? sw.best.trial : null;
      const cols = [['trial', 'trial', (t) => t.trial],
        ...keys.map((k, i) => [`value-${i}`, k, (t) => (t.values || {})[k]]),
        ['rung', 'rung', (t) => t.rung],
        ...rungs.map((steps, r) => [`result-${r}`, `@ ${fmtInt(steps)} steps`,
          (t) => (isNum((t.results || [])[r]) ? t.results[r] : null)]),
        ['run', 'run', (t) => t.run && t.run.name],
        ['status', 'status', (t) => t.run && t.run.status]];
      const value = (cols.find((c) => c[0] === sort.key) || cols[0])[2];
      const trials = (sw.trials || []).slice().sort((a, b) => sort.dir * compareValues(value(a), value(b)) || a.trial - b.trial);
      const thead = h('thead', {}, h('tr', {}, cols.map(([k, label]) => sortHeader(label, k, sort, () => showTrials(sweep),
        `sweep-sort-${k}`))));
      set(el.trials, thead, h('tbody', {}, trials.map((t) => {
        const best = t.trial === bestTrial;
        const run = t.run || {};
        return h('tr', {id: `sweep-trial-${t.trial}`, 'data-trial': String(t.trial), class: best ? 'best' : null},
        h('td', {class: 'col-trial num'}, String(t.trial),
          best ? h('span', {class: 'best-mark', title: 'the best trial', text: ' ★ best'}) : null),
        keys.map((k) => {
          const v = (t.values || {})[k];
          return h('td', {class: 'col-value', 'data-key': k, 'data-value': JSON.stringify(v === undefined ? null : v),
            title: String(v), text: valueText(v)});
        }),
        h('td', {class: 'col-rung num', 'data-value': String(t.rung), text: String(t.rung)}),
        rungs.map((_, r) => {
          const v = (t.results || [])[r];
          return h('td', {class: 'col-result num', 'data-rung': String(r), 'data-value': isNum(v) ? String(v) : '',
            text: r < (t.results || []).length ? fmtNum(v) : ''});
        }),
        h('td', {class: 'col-run'}, run.id ? h('a', {href: `#/runs/${run.id}`, id: `sweep-run-link-${t.trial}`,
          text: run.name || run.id}) : '—'),
        h('td', {class: 'col-status'}, statusBadge(run.status),
          h('span', {class: 'muted small-text', text: ` ${fmtInt(run.step)} / ${fmtInt(run.steps)}`})));
      })));
      markSorted(thead, sort);
    }

    /* One scatter per searched key: x the trial's value (a log axis for a log_uniform range; a choice by its
     * position, its values as the ticks), y the trial's latest result, one colour per rung; the best trial a star. */
    function showCharts(sw) {
      if (!hasChart) {
        if (!el.charts.firstChild) {
          el.charts.appendChild(h('p', {class: 'muted', text: 'Chart.js is not available: the results are in the trials table.'}));
        }
        return;
      }
      const space = (sw.spec && sw.spec.space) || {};
      const rungs = sw.rung_steps || [];
      const bestTrial = sw.best ? sw.best.trial : null;
      Object.entries(space).forEach(([key, p], i) => {
        const choices = Array.isArray(p) ? p : p && p.type === 'choice' ? p.values || [] : null;
        const byIndex = !!choices;
        let chart = charts[key];
        if (!chart) {
          const log = !!(p && p.type === 'log_uniform');
          const canvas = h('canvas', {id: `sweep-chart-${i}`, 'aria-label': `${sw.spec.metric} against ${key}`, role: 'img'});
          el.charts.appendChild(h('figure', {class: 'chart'},
            h('figcaption', {}, `${sw.spec.metric} against `, h('code', {text: key}), log ? ' (log axis)' : ''),
            h('div', {class: 'chart-box'}, canvas)));
          chart = charts[key] = new window.Chart(canvas, {
            type: 'scatter',
            data: {datasets: rungs.map((steps, r) => ({
              label: `rung ${r} (${fmtInt(steps)} steps)`, data: [],
              borderColor: COLORS[r % COLORS.length], backgroundColor: COLORS[r % COLORS.length],
              pointRadius: (c) => (c.raw && c.raw.best ? 8 : 4), pointStyle: (c) => (c.raw && c.raw.best ? 'star' : 'circle'),
              borderWidth: (c) => (c.raw && c.raw.best ? 2 : 1)
            }))},
            options: {
              animation: false, responsive: true, maintainAspectRatio: false, parsing: false,
              scales: {
                x: {type: log ? 'logarithmic' : 'linear', title: {display: true, text: key},
                  /* the axis spans the searched range (a choice: its positions) */
                  min: byIndex ? -0.5 : p && isNum(p.min) ? p.min : undefined,
                  max: byIndex ? choices.length - 0.5 : p && isNum(p.max) ? p.max : undefined,
                  afterBuildTicks: byIndex ? (axis) => { axis.ticks = choices.map((_, v) => ({value: v})); } : undefined,
                  ticks: byIndex ? {autoSkip: false, callback: (v) => (Number.isInteger(v) && choices[v] !== undefined
                    ? valueText(choices[v]) : '')} : {maxTicksLimit: 8}},
                y: {type: 'linear', title: {display: true, text: sw.spec.metric}, ticks: {maxTicksLimit: 6}}
              },
              plugins: {legend: {display: rungs.length > 1},
                tooltip: {callbacks: {label: (c) => `trial ${c.raw.trial}: ${key} = ${valueText(c.raw.value)}, ` +
                  `${sw.spec.metric} ${fmtNum(c.raw.y)}`}}}
            }
          });
        }
        const sets = rungs.map(() => []);
        for (const t of sw.trials || []) {
          const res = lastResult(t), v = (t.values || {})[key];
          if (!res || v === undefined) continue;
          const x = byIndex ? choices.findIndex((c) => JSON.stringify(c) === JSON.stringify(v)) : v;
          if (!isNum(x) || x < 0 && byIndex || res.rung >= sets.length) continue;
          sets[res.rung].push({x, y: res.value, trial: t.trial, value: v, best: t.trial === bestTrial});
        }
        sets.forEach((pts, r) => { chart.data.datasets[r].data = pts; });
        chart.update('none');
      });
      window.towerCharts = charts;
    }

    function show(sw) {
      sweep = sw;
      el.name.textContent = sw.name;
      set(el.status, statusBadge(sw.status));
      el.cancel.hidden = sw.status !== 'running';
      el.resume.hidden = sw.status !== 'cancelled';
      el.del.hidden = sw.status === 'running';
      showFacts(sw);
      showBest(sw);
      showRungs(sw);
      showTrials(sw);
      showCharts(sw);
      if (!el.spec.textContent) el.spec.textContent = pretty(Object.assign({}, sw.spec, {config: sw.config}));
    }

    /* GET /sweeps/{ref}, shown when it changed; a sweep with nothing left to change is asked every 10 s. */
    async function load(force) {
      if (!force && settled() && Date.now() - lastFetch < 10000) return;
      const text = JSON.stringify(await api(`/sweeps/${encodeURIComponent(ref)}`));
      lastFetch = Date.now();
      if (!ctx.alive || text === lastText) return;
      lastText = text;
      show(JSON.parse(text));
    }

    (async () => {
      try {
        await load(true);
      } catch (e) {
        if (!ctx.alive) return;
        showError(e, 'sweep');
        el.name.textContent = e.status === 404 ? `No sweep ${ref}` : ref;
        return;
      }
      if (ctx.alive) ctx.poll(2000, () => load(false), 'sweep');
    })();
  }

  /* ============================== datasets ============================== */

  function viewDatasets(ctx, main, selected) {
    const body = h('tbody', {id: 'datasets-body'});
    const empty = h('p', {id: 'datasets-empty', class: 'muted', hidden: true}, 'No datasets yet. ',
      h('a', {href: '#/upload', text: 'Upload one.'}));
    const detail = h('section', {id: 'dataset-detail'});
    append(main,
      h('div', {class: 'title-row'}, h('h2', {text: 'Datasets'}),
        h('a', {href: '#/upload', class: 'button', id: 'datasets-upload', text: 'Upload'})),
      h('div', {class: 'table-wrap'},
        h('table', {id: 'datasets-table', class: 'grid'},
          h('thead', {}, h('tr', {}, ['Name', 'Status', 'Source', 'Train', 'Test', 'Shape', 'Size', 'Created', '']
            .map((t) => h('th', {text: t})))),
          body)),
      empty, detail);
    let shownStatus = null;
    const isSelected = (d) => d.id === selected || d.name === selected; /* the page takes an id or a name */

    async function refresh() {
      const reply = await api('/datasets');
      if (!ctx.alive) return;
      set(body, reply.datasets.map((d) => h('tr', {id: `dataset-row-${d.id}`, class: isSelected(d) ? 'selected' : null,
        'data-status': d.status},
      h('td', {}, h('a', {href: `#/datasets/${d.id}`, id: `dataset-link-${d.id}`, text: d.name}),
        h('div', {class: 'id', text: d.id})),
      h('td', {}, statusBadge(d.status)),
      h('td', {text: d.source || '—'}),
      h('td', {class: 'num', text: fmtInt(d.train_examples)}),
      h('td', {class: 'num', text: fmtInt(d.test_examples)}),
      h('td', {text: Array.isArray(d.shape) ? d.shape.join('×') : '—'}),
      h('td', {class: 'num', text: fmtBytes(d.bytes)}),
      h('td', {text: fmtTime(d.created)}),
      h('td', {}, h('button', {type: 'button', class: 'small', id: `dataset-delete-${d.id}`, text: 'Delete',
        onclick: () => deleteDataset(d, refresh)})))));
      empty.hidden = reply.datasets.length > 0;
      const sel = reply.datasets.find(isSelected);
      if (selected && sel && sel.status !== shownStatus) {
        shownStatus = sel.status;
        await showDataset(ctx, detail, sel);
      }
    }

    if (selected) {
      /* The list has only the newest datasets: fetch the selected one directly too. */
      api(`/datasets/${encodeURIComponent(selected)}`).then((d) => {
        if (!ctx.alive || shownStatus === d.status) return;
        shownStatus = d.status;
        return showDataset(ctx, detail, d);
      }).catch((e) => {
        if (ctx.alive) set(detail, h('p', {class: 'banner error', id: 'dataset-error', text: errorText(e)}));
      });
    }
    ctx.poll(3000, refresh, 'datasets');
  }

  async function deleteDataset(d, after) {
    if (!window.confirm(`Delete dataset ${d.name} (${d.id})?`)) return;
    try {
      await api(`/datasets/${d.id}`, {method: 'DELETE'});
      clearError('action');
      if (location.hash === `#/datasets/${d.id}`) location.hash = '#/datasets';
    } catch (e) {
      showError(e);
    }
    if (after) await after().catch(() => {});
  }

  async function showDataset(ctx, detail, d) {
    const fact = (k, v) => h('div', {}, h('dt', {text: k}), h('dd', {}, v));
    const features = d.features ? Object.entries(d.features).map(([k, v]) => `${k}: ${v}`).join(', ') : '—';
    set(detail,
      h('h3', {id: 'dataset-title'}, d.name, ' ', statusBadge(d.status)),
      d.error ? h('p', {class: 'banner error', id: 'dataset-error', text: errorText(new ApiError(d.error.code || 'FAILED',
        d.error.message || String(d.error), 0))}) : null,
      h('dl', {class: 'facts', id: 'dataset-facts'},
        fact('id', h('code', {text: d.id})),
        fact('examples', `${fmtInt(d.train_examples)} train · ${fmtInt(d.test_examples)} test`),
        fact('shape', h('span', {id: 'dataset-shape', text: Array.isArray(d.shape) ? `${d.shape.join(' × ')} ${d.dtype || ''}` +
          (d.shape_rule ? ` (${d.shape_rule})` : '') : '—'})),
        fact('features', features),
        fact('source', d.source || '—'),
        fact('test split', h('span', {id: 'dataset-split', text: splitText(d.test_split)})),
        fact('classes', h('span', {id: 'dataset-classes', text: (d.class_names || []).join(', ') || '—'})),
        fact('size', fmtBytes(d.bytes))));
    if (d.status !== 'ready') {
      if (d.status === 'converting') detail.appendChild(h('p', {class: 'muted', text: 'Converting… this page updates when it is ready.'}));
      return;
    }
    detail.appendChild(h('div', {class: 'two-col'},
      h('section', {}, h('h3', {text: 'Label histogram'}), histogramTable(d.label_histogram, d.class_names)),
      h('section', {id: 'dataset-samples-section'}, h('h3', {text: 'Samples'}),
        h('p', {class: 'muted', id: 'dataset-samples-note', text: 'loading…'}))));
    const reply = await api(`/datasets/${d.id}/samples?n=16`);
    if (!ctx.alive) return;
    const section = $('dataset-samples-section');
    if (!section) return;
    const note = $('dataset-samples-note');
    const samples = reply.samples || [];
    const shape = reply.shape || d.shape || [];
    if (samples.length && samples[0].pixels) {
      section.appendChild(drawSamples(samples, shape, d.class_names));
      note.textContent = `${samples.length} examples from the training set, label below each`;
    } else {
      section.appendChild(featuresTable(samples, d.class_names, d.feature_names));
      note.textContent = `${samples.length} examples from the training set`;
    }
  }

  /* How the test split was made (the dataset's test_split), in words; a dataset without one says so. */
  function splitText(split) {
    if (!split || split.method === 'none') return 'none: runs on this dataset are never evaluated';
    if (split.method === 'file') return 'a test file';
    if (split.method === 'first' || split.method === 'last') return `the ${split.method} ${fmtInt(split.count)} examples`;
    return `${fmtPct(split.fraction)} held out, seed ${split.seed}${split.stratified ? ', stratified by class' : ''}`;
  }

  /* names: the dataset's class names (label k -> names[k]), or null. */
  function histogramTable(hist, names) {
    if (!hist) return h('p', {class: 'muted', text: 'no histogram'});
    const splits = Object.keys(hist);
    const labels = Array.from(new Set(splits.flatMap((s) => Object.keys(hist[s] || {}))))
      .sort((a, b) => (isNaN(a) || isNaN(b) ? a.localeCompare(b) : Number(a) - Number(b)));
    const max = {};
    for (const s of splits) max[s] = Math.max(1, ...Object.values(hist[s] || {}).filter(isNum));
    return h('table', {id: 'dataset-histogram', class: 'grid histogram'},
      h('thead', {}, h('tr', {}, h('th', {text: 'label'}), splits.map((s) => h('th', {text: s, colspan: '2'})))),
      h('tbody', {}, labels.map((l) => h('tr', {},
        h('td', {text: names && names[l] !== undefined ? `${l} · ${names[l]}` : l}),
        splits.map((s) => {
          const n = (hist[s] || {})[l] || 0;
          const bar = h('div', {class: `hbar hbar-${s}`});
          bar.style.width = (100 * n / max[s]).toFixed(1) + '%';
          return [h('td', {class: 'num', text: fmtInt(n)}), h('td', {class: 'bar-cell'}, bar)];
        })))));
  }

  /* A label as the page shows it: the dataset's class name when it has one, else the value. */
  const labelText = (names, label) => (names && names[label] != null ? names[label] : String(label));

  /* One canvas with the samples in a grid, each scaled up with no smoothing and its label (its class
   * name, when the dataset has names) under it. pixels are uint8 h·w·d (d = 1 grayscale, 3 RGB, 4 RGBA,
   * otherwise the first channel); a 4-D shape [depth, h, w, d] shows the middle slice. */
  function drawSamples(samples, shape, names) {
    let depth = 1, hgt, wid, ch;
    if (shape.length >= 4) [depth, hgt, wid, ch] = shape.slice(-4);
    else if (shape.length === 3) [hgt, wid, ch] = shape;
    else if (shape.length === 2) [hgt, wid, ch] = [shape[0], shape[1], 1];
    else {
      const n = samples[0].pixels.length;
      hgt = wid = Math.round(Math.sqrt(n));
      ch = 1;
      if (hgt * wid !== n) { hgt = 1; wid = n; }
    }
    const scale = Math.max(1, Math.floor(84 / Math.max(hgt, wid)));
    const cols = Math.min(8, samples.length), rowsN = Math.ceil(samples.length / cols);
    const cellW = wid * scale + 8, cellH = hgt * scale + 20;
    const canvas = h('canvas', {id: 'dataset-samples', width: String(cols * cellW), height: String(rowsN * cellH),
      'aria-label': 'sample images', role: 'img'});
    const g = canvas.getContext('2d');
    const tile = document.createElement('canvas');
    tile.width = wid;
    tile.height = hgt;
    const tg = tile.getContext('2d');
    const offset = Math.floor(depth / 2) * hgt * wid * ch;
    let top = 0;
    for (const s of samples) for (const v of s.pixels || []) if (v > top) top = v;
    const scaleUp = top > 0 && top <= 1 ? 255 : 1; /* float pixels in [0, 1] */
    g.imageSmoothingEnabled = false;
    g.font = '12px sans-serif';
    g.textAlign = 'center';
    g.fillStyle = getComputedStyle(document.body).color || '#222';
    samples.forEach((s, i) => {
      const img = tg.createImageData(wid, hgt), px = s.pixels || [];
      for (let p = 0; p < hgt * wid; p++) {
        const base = offset + p * ch, v = (k) => Math.max(0, Math.min(255, (px[base + k] || 0) * scaleUp));
        const rgb = ch === 3 || ch === 4 ? [v(0), v(1), v(2)] : [v(0), v(0), v(0)];
        img.data.set([rgb[0], rgb[1], rgb[2], ch === 4 ? v(3) : 255], p * 4);
      }
      tg.putImageData(img, 0, 0);
      const x = (i % cols) * cellW + 4, y = Math.floor(i / cols) * cellH + 2;
      g.drawImage(tile, x, y, wid * scale, hgt * scale);
      g.fillText(labelText(names, s.label), x + wid * scale / 2, y + hgt * scale + 14);
    });
    return canvas;
  }

  /* The first samples' features under their CSV column names (columns: the dataset's feature_names). */
  function featuresTable(samples, names, columns) {
    const n = Math.min(12, Math.max(0, ...samples.map((s) => (s.features || []).length)));
    return h('table', {id: 'dataset-features', class: 'grid numeric'},
      h('thead', {}, h('tr', {}, h('th', {text: 'label'}),
        Array.from({length: n}, (_, i) => h('th', {text: (columns || [])[i] || `feature ${i + 1}`})))),
      h('tbody', {}, samples.map((s) => h('tr', {}, h('td', {text: labelText(names, s.label)}),
        Array.from({length: n}, (_, i) => h('td', {text: fmtNum((s.features || [])[i], 3)}))))));
  }

  /* ============================== upload ============================== */

  /* Without a test file: a held-out fraction or the last N examples; and the class names (server/API.md,
   * Uploads). */
  const SPLIT_FIELDS = [['validation_split', 'validation split', '0.1 (no test file: hold out this fraction)'],
    ['split_seed', 'split seed', '0'], ['class_names', 'class names', 'cat, dog, bird (label 0, 1, 2, ...)']];
  const LAST_FIELD = ['test_last', 'test: the last N', '5000 (no test file: hold out the last N examples)'];

  const UPLOAD_KINDS = {
    idx: {title: 'IDX (MNIST style, .gz or raw)', files: [['images', 'images', true], ['labels', 'labels', true],
      ['test_images', 'test images', false], ['test_labels', 'test labels', false]], text: [LAST_FIELD, SPLIT_FIELDS[2]]},
    npy: {title: 'NumPy .npy', files: [['features', 'features', true], ['labels', 'labels', true],
      ['test_features', 'test features', false], ['test_labels', 'test labels', false]], text: [LAST_FIELD, ...SPLIT_FIELDS]},
    csv: {title: 'CSV with a label column', files: [['csv', 'CSV file', true], ['test_csv', 'test CSV file', false]],
      text: [['label_column', 'label column', 'label'], LAST_FIELD, ...SPLIT_FIELDS]},
    tfrecord: {title: 'TFRecord (tf.train.Example)', files: [['tfrecord', 'train TFRecord', true],
      ['test_tfrecord', 'test TFRecord', false]],
      text: [['shape', 'shape', '28x28x1 (default: from the records)'], LAST_FIELD, ...SPLIT_FIELDS]}
  };

  function viewUpload(ctx, main) {
    const kind = h('select', {id: 'upload-kind', name: 'kind'},
      Object.entries(UPLOAD_KINDS).map(([k, v]) => h('option', {value: k, text: v.title})));
    const name = h('input', {id: 'upload-name', name: 'name', required: true, autocomplete: 'off',
      pattern: NAME_RE.source.slice(1, -1), placeholder: 'fashion-mnist', title: 'letters, digits, . _ - (up to 64)'});
    const groups = {};
    const inputs = {};
    for (const [k, v] of Object.entries(UPLOAD_KINDS)) {
      groups[k] = h('fieldset', {id: `upload-${k}`, class: 'files'}, h('legend', {text: v.title}),
        v.files.map(([field, label, req]) => {
          const input = h('input', {type: 'file', id: `upload-${k}-${field}`.replace(/_/g, '-'), 'data-field': field});
          inputs[`${k}:${field}`] = input;
          return h('label', {}, h('span', {text: label + (req ? ' *' : '')}), input);
        }),
        (v.text || []).map(([field, label, ph]) => {
          const input = h('input', {type: 'text', id: `upload-${k}-${field}`.replace(/_/g, '-'), 'data-field': field,
            placeholder: ph});
          inputs[`${k}:${field}`] = input;
          return h('label', {}, h('span', {text: label}), input);
        }));
    }
    const bar = h('progress', {id: 'upload-progress', max: '1', value: '0', hidden: true});
    const status = h('div', {id: 'upload-status', class: 'status-line', role: 'status'});
    const submit = h('button', {type: 'submit', id: 'upload-submit', text: 'Upload'});
    const form = h('form', {id: 'upload-form', class: 'form', novalidate: true},
      h('label', {}, h('span', {text: 'Name *'}), name),
      h('label', {}, h('span', {text: 'Format'}), kind),
      Object.values(groups), h('div', {class: 'actions'}, submit, bar), status);
    append(main, h('h2', {text: 'Upload a dataset'}),
      h('p', {class: 'muted'}, 'The files stream to the server, which converts them to TFRecord in the background. ',
        'Names may be reused: a run naming a dataset gets the newest ready one.'), form);
    const showKind = () => {
      for (const [k, g] of Object.entries(groups)) g.hidden = k !== kind.value;
    };
    kind.addEventListener('change', showKind);
    showKind();

    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      status.className = 'status-line';
      const spec = UPLOAD_KINDS[kind.value];
      if (!NAME_RE.test(name.value)) {
        status.className = 'status-line error';
        status.textContent = 'The name must be letters, digits, ".", "_" or "-" (up to 64), starting with a letter or digit.';
        return;
      }
      const fd = new FormData();
      for (const [field, label, req] of spec.files) {
        const input = inputs[`${kind.value}:${field}`];
        if (input.files.length) fd.append(field, input.files[0], input.files[0].name);
        else if (req) {
          status.className = 'status-line error';
          status.textContent = `Choose a file for "${label}".`;
          return;
        }
      }
      for (const [field] of spec.text || []) {
        const v = inputs[`${kind.value}:${field}`].value.trim();
        if (v) fd.append(field, v);
      }
      submit.disabled = true;
      bar.hidden = false;
      bar.value = 0;
      status.textContent = 'Uploading…';
      try {
        const d = await postForm(`/datasets?name=${encodeURIComponent(name.value)}`, fd, (f) => { bar.value = f; });
        if (!ctx.alive) return;
        status.className = 'status-line ok';
        set(status, 'Uploaded as ', h('a', {href: `#/datasets/${d.id}`, id: 'upload-result', text: d.id}),
          ` (${d.status}).`);
        location.hash = `#/datasets/${d.id}`;
      } catch (e) {
        if (!ctx.alive) return;
        status.className = 'status-line error';
        status.textContent = errorText(e);
      } finally {
        submit.disabled = false;
        bar.hidden = true;
      }
    });
  }

  /* ============================== submit ============================== */

  let submitDraft = null; /* a config the next submit form opens with (clone, fine-tune) */

  /* Opens the submit form with cfg: the run's config under a new name, with `change` applied. */
  function openSubmit(run, suffix, change) {
    const cfg = JSON.parse(JSON.stringify(run.config || {}));
    cfg.name = `${run.name || run.id}-${suffix}`.slice(0, 64);
    change(cfg);
    submitDraft = cfg;
    location.hash = '#/submit';
  }

  function viewSubmit(ctx, main) {
    const select = h('select', {id: 'submit-dataset', 'aria-label': 'dataset'},
      h('option', {value: '', text: '(as named in the config)'}));
    const text = h('textarea', {id: 'submit-config', rows: '28', spellcheck: 'false', autocomplete: 'off',
      'aria-label': 'run config (JSON)'});
    text.value = pretty(submitDraft || SEED_CONFIG);
    submitDraft = null;
    const status = h('div', {id: 'submit-status', class: 'status-line', role: 'status'});
    const submit = h('button', {type: 'submit', id: 'submit-run', text: 'Submit run'});
    const reset = h('button', {type: 'button', id: 'submit-reset', text: 'Reset to the seed config'});
    const form = h('form', {id: 'submit-form', class: 'form wide'},
      h('label', {}, h('span', {text: 'Dataset'}), select),
      h('label', {class: 'block'}, h('span', {text: 'Config'}), text),
      h('div', {class: 'actions'}, submit, reset), status);
    append(main, h('h2', {text: 'Submit a run'}),
      h('p', {class: 'muted'}, 'The ', h('code', {text: 'tower train'}), ' config, with ', h('code', {text: '"dataset"'}),
        ' naming an uploaded dataset (id or name), plus the optional server keys ', h('code', {text: '"name"'}), ', ',
        h('code', {text: '"max_restarts"'}), ' and ', h('code', {text: '"deadline_s"'}), '.'), form);
    let idemKey = randomKey();
    let ready = [];


    function selectFromConfig() {
      let cfg;
      try { cfg = JSON.parse(text.value); } catch (_) { return; }
      const want = datasetOf(cfg);
      const byId = ready.find((d) => d.id === want);
      const byName = ready.find((d) => d.name === want); /* the list is newest first */
      select.value = (byId || byName || {id: ''}).id;
    }

    async function loadDatasets() {
      const reply = await api('/datasets');
      if (!ctx.alive) return;
      ready = reply.datasets.filter((d) => d.status === 'ready');
      set(select, h('option', {value: '', text: '(as named in the config)'}),
        ready.map((d) => h('option', {value: d.id, text: `${d.name} — ${d.id} (${fmtInt(d.train_examples)} train)`})));
      selectFromConfig();
    }

    select.addEventListener('change', () => {
      const d = ready.find((x) => x.id === select.value);
      if (!d) return;
      let cfg;
      try {
        cfg = JSON.parse(text.value);
      } catch (e) {
        status.className = 'status-line error';
        status.textContent = 'The config is not valid JSON: ' + e.message;
        return;
      }
      const newest = ready.find((x) => x.name === d.name);
      const ref = newest && newest.id === d.id ? d.name : d.id;
      if (cfg.dataset && typeof cfg.dataset === 'object') cfg.dataset.name = ref;
      else cfg.dataset = ref;
      text.value = pretty(cfg);
      idemKey = randomKey();
    });
    text.addEventListener('input', () => { idemKey = randomKey(); });
    reset.addEventListener('click', () => {
      text.value = pretty(SEED_CONFIG);
      idemKey = randomKey();
      selectFromConfig();
    });

    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      let cfg;
      try {
        cfg = JSON.parse(text.value);
      } catch (e) {
        status.className = 'status-line error';
        status.textContent = 'The config is not valid JSON: ' + e.message;
        return;
      }
      submit.disabled = true;
      status.className = 'status-line';
      status.textContent = 'Submitting…';
      try {
        const reply = await api('/runs', {method: 'POST', json: cfg, headers: {'Idempotency-Key': idemKey}});
        if (!ctx.alive) return;
        status.className = 'status-line ok';
        status.textContent = `Submitted ${reply.id}.`;
        location.hash = `#/runs/${reply.id}`;
      } catch (e) {
        if (!ctx.alive) return;
        status.className = 'status-line error';
        status.textContent = errorText(e);
      } finally {
        submit.disabled = false;
      }
    });
    loadDatasets().catch((e) => { if (ctx.alive) showError(e, 'datasets'); });
  }

  /* ============================== devices ============================== */

  function viewDevices(ctx, main) {
    const body = h('tbody', {id: 'devices-body'});
    append(main, h('h2', {text: 'Devices'}),
      h('div', {class: 'table-wrap'}, h('table', {id: 'devices-table', class: 'grid'},
        h('thead', {}, h('tr', {}, ['Id', 'Kind', 'Name', 'Run'].map((t) => h('th', {text: t})))), body)));
    ctx.poll(3000, async () => {
      const reply = await api('/devices');
      if (!ctx.alive) return;
      set(body, reply.devices.map((d) => h('tr', {id: `device-row-${d.id}`},
        h('td', {}, h('code', {text: d.id})), h('td', {text: d.kind}), h('td', {text: d.name}),
        h('td', {}, d.run ? h('a', {href: `#/runs/${d.run}`, text: d.run}) : h('span', {class: 'muted', text: 'idle'})))));
    }, 'devices');
  }

  /* ============================== header ============================== */

  function startHeader() {
    const input = $('token');
    input.value = token();
    input.addEventListener('input', () => {
      try {
        if (input.value) localStorage.setItem(TOKEN_KEY, input.value);
        else localStorage.removeItem(TOKEN_KEY);
      } catch (_) { /* storage disabled: the token lives for this page only */ }
    });
    $('error-close').addEventListener('click', () => {
      $('error').hidden = true;
      errorKey = null;
    });
    const tick = () => refreshHealth().then(() => setTimeout(tick, 5000));
    tick();
  }

  async function refreshHealth() {
    const health = $('health');
    try {
      const r = await api('/health');
      health.className = 'muted';
      health.textContent = `v${r.version} · ${r.running} running · ${r.queued} queued`;
    } catch (e) {
      health.className = 'error';
      health.textContent = 'server unreachable';
    }
  }

  startHeader();
  window.addEventListener('hashchange', route);
  route();
})();
