// hale dashboard: what hale sees and does, live. Data comes only from the
// admin API and the event stream of this origin; the admin token (when keys
// are configured) is kept in this tab's sessionStorage and sent as a bearer
// header. Views re-read their endpoint when an event arrives (debounced) and
// every POLL_MS as a backstop, so a paused agent shows within a second or two.
import { html, render } from '/dashboard/preact-htm.js';

const TOKEN_KEY = 'hale.token';
const POLL_MS = 2000;
const EVENTS_KEPT = 500;
const SPARK_POINTS = 60;
const REFRESH_DEBOUNCE_MS = 250;
// `GET /agents` answers a page (the store holds every agent ever seen): the
// paused agents come first whatever page is shown, then a page by id.
const AGENTS_PAGE = 100;
const PAUSED_SHOWN = 1000;

const state = {
  needLogin: false, loginError: '', live: false, error: '',
  agents: [], agentsAt: 0, agentsAfter: null, agentsNext: null, pausedMore: false, deployments: [], nodes: null, sinks: [], dlq: [],
  history: null, events: [], filterKind: '', filterAgent: '',
  turn: null, turnId: '', busy: '', spark: {},
};

const token = () => sessionStorage.getItem(TOKEN_KEY);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

class Unauthorized extends Error {}

function authHeaders() {
  const t = token();
  return t ? { Authorization: 'Bearer ' + t } : {};
}

async function api(path, opts = {}) {
  const headers = authHeaders();
  if (opts.body !== undefined) headers['Content-Type'] = 'application/json';
  const r = await fetch(path, {
    method: opts.method || 'GET', headers,
    body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
  });
  if (r.status === 401 || r.status === 403) throw new Unauthorized(await r.text());
  if ((r.status === 404 || r.status === 405) && opts.optional) return null;
  const text = await r.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch { body = text; }
  if (!r.ok) {
    const msg = body && body.error ? body.error.message : String(text);
    throw new Error(`${path}: ${r.status} ${msg}`);
  }
  return body;
}

// ---- reading -------------------------------------------------------------

// One read of the views at a time: a busy gateway sends many events, and
// each asks for a refresh; those that come during a read make one more after
// it, never a pile of overlapping reads of `/agents`.
let reading = false;
let again = false;
async function refresh() {
  if (reading) { again = true; return; }
  reading = true;
  try { await readViews(); } finally { reading = false; }
  if (again) { again = false; refresh(); }
}

async function readViews() {
  try {
    const pageUrl = `/agents?limit=${AGENTS_PAGE}`
      + (state.agentsAfter ? `&after=${encodeURIComponent(state.agentsAfter)}` : '');
    const [paused, agents, deps, ready, dlq, nodes] = await Promise.all([
      api(`/agents?state=paused&limit=${PAUSED_SHOWN}`), api(pageUrl), api('/deployments'),
      api('/ready', { optional: true }), api('/dlq', { optional: true }), api('/nodes', { optional: true }),
    ]);
    const page = listOf(agents, 'agents');
    const first = listOf(paused, 'agents').filter((a) => !page.some((b) => b.id === a.id));
    state.agents = first.concat(page);
    state.agentsNext = agents && agents.next ? agents.next : null;
    state.pausedMore = !!(paused && paused.next);
    state.agentsAt = Date.now();
    state.deployments = listOf(deps, 'deployments');
    state.sinks = ready && ready.sinks ? listOf(ready.sinks, 'sinks') : [];
    state.dlq = listOf(dlq, 'dead_letters');
    state.nodes = nodes === null ? null : listOf(nodes, 'nodes');
    for (const d of state.deployments) {
      const key = d.deployment || `${d.provider}/${d.model}`;
      const s = (state.spark[key] ||= []);
      s.push(typeof d.success_ratio === 'number' ? d.success_ratio : null);
      if (s.length > SPARK_POINTS) s.shift();
    }
    state.error = '';
    state.needLogin = false;
  } catch (e) {
    if (e instanceof Unauthorized) state.needLogin = true;
    else state.error = String(e.message || e);
  }
  rerender();
}

async function refreshHistory() {
  try {
    const from = Date.now() - 24 * 3600 * 1000;
    state.history = await api(`/history?from=${from}`, { optional: true });
  } catch (e) {
    if (e instanceof Unauthorized) state.needLogin = true;
  }
  rerender();
}

function listOf(v, key) {
  if (Array.isArray(v)) return v;
  if (v && Array.isArray(v[key])) return v[key];
  if (v && typeof v === 'object') return Object.values(v).find(Array.isArray) || [];
  return [];
}

let pending = null;
function refreshSoon() {
  if (pending) return;
  pending = setTimeout(() => { pending = null; refresh(); }, REFRESH_DEBOUNCE_MS);
}

// The event stream over fetch (EventSource cannot send a bearer header).
async function streamEvents() {
  let after = null;
  for (;;) {
    try {
      const url = after ? `/events?after=${encodeURIComponent(after)}` : '/events?tail=200';
      const r = await fetch(url, { headers: authHeaders() });
      if (r.status === 401 || r.status === 403) { state.needLogin = true; rerender(); return; }
      if (r.status === 400 && after) { after = null; continue; }
      if (!r.ok || !r.body) throw new Error('events ' + r.status);
      state.live = true; rerender();
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value.replace(/\r\n/g, '\n');
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const ev = parseFrame(buf.slice(0, i));
          buf = buf.slice(i + 2);
          if (ev) { after = ev.id || after; onEvent(ev); }
        }
      }
    } catch (e) { /* reconnect below */ }
    state.live = false; rerender();
    await sleep(1000);
  }
}

function parseFrame(frame) {
  const data = [];
  for (const line of frame.split('\n')) {
    if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
  }
  if (!data.length) return null;
  try { return JSON.parse(data.join('\n')); } catch { return null; }
}

function onEvent(ev) {
  state.events.push(ev);
  if (state.events.length > EVENTS_KEPT) state.events.shift();
  refreshSoon();
}

// ---- acting --------------------------------------------------------------

async function act(label, path, body) {
  state.busy = label; rerender();
  try {
    await api(path, { method: 'POST', body: body === undefined ? {} : body });
    state.error = '';
  } catch (e) {
    if (e instanceof Unauthorized) state.needLogin = true;
    else state.error = String(e.message || e);
  }
  state.busy = '';
  await refresh();
}

const agentPath = (id, rest) => `/agents/${encodeURIComponent(id)}/${rest}`;

async function openTurn(id) {
  state.turnId = id; state.turn = null; rerender();
  try { state.turn = await api(`/turns/${encodeURIComponent(id)}`); }
  catch (e) { state.turn = { error: String(e.message || e) }; }
  rerender();
}

function login(ev) {
  ev.preventDefault();
  const v = ev.target.elements.token.value.trim();
  if (!v) { state.loginError = 'a token is needed'; rerender(); return; }
  sessionStorage.setItem(TOKEN_KEY, v);
  state.loginError = ''; state.needLogin = false;
  start();
}

function logout() {
  sessionStorage.removeItem(TOKEN_KEY);
  state.needLogin = true; rerender();
}

// ---- views ---------------------------------------------------------------

const fmtMs = (ms) => ms == null ? '—' : ms < 1000 ? `${ms} ms` : ms < 120000
  ? `${(ms / 1000).toFixed(0)} s` : `${(ms / 60000).toFixed(1)} min`;
const fmtTime = (ms) => ms ? new Date(ms).toLocaleTimeString() : '—';
const pct = (r) => typeof r === 'number' ? `${(r * 100).toFixed(0)} %` : '—';

function stateBadge(s) {
  const cls = { active: 'ok', healthy: 'ok', closed: 'ok', up: 'ok', paused: 'bad', ejected: 'bad',
    open: 'bad', down: 'bad', offline: 'bad', tripped: 'bad', terminated: 'bad', degraded: 'warn',
    half_open: 'warn', probing: 'warn', stale: 'warn', stuck: 'warn', escalated: 'bad' }[s] || 'info';
  return html`<span class="badge ${cls}" data-state=${s}>${s}</span>`;
}

function Agents() {
  const rows = state.agents.map((a) => {
    const p = a.pause;
    const left = p && p.next_trial_in_ms != null
      ? Math.max(0, p.next_trial_in_ms - (Date.now() - state.agentsAt)) : null;
    const health = a.health || {};
    const hstate = health.state || (health.snapshot && health.snapshot.state) || '';
    const spend = a.budget && a.budget.agent_spend ? a.budget.agent_spend.tokens : null;
    const cap = a.budget && a.budget.caps ? a.budget.caps.max_tokens_per_agent : null;
    const phase = health.intervention && health.intervention.phase;
    const pendingIntervention = phase && phase !== 'watching' ? phase : null;
    return html`<tr data-agent=${a.id}>
      <td><b>${a.id}</b></td>
      <td class="agent-state">${stateBadge(a.state)} ${hstate && hstate !== 'healthy' ? stateBadge(hstate) : ''}
        ${p ? html`<div class="muted">by ${p.by}${left != null ? html`, trial in <span class="countdown">${fmtMs(left)}</span>` : ''}</div>` : ''}</td>
      <td>${a.consecutive_failures}</td>
      <td>${a.counters ? a.counters.turns : '—'}</td>
      <td>${spend == null ? '—' : spend}${cap ? html` / ${cap}` : ''}</td>
      <td>${pendingIntervention ? html`<span class="warn">${typeof pendingIntervention === 'string' ? pendingIntervention : JSON.stringify(pendingIntervention)}</span>` : html`<span class="muted">none</span>`}
        ${(a.stopped_tasks || []).length ? html`<div class="warn">stopped: ${a.stopped_tasks.map((t) => t.task || t).join(', ')}</div>` : ''}</td>
      <td>
        ${a.state === 'paused'
          ? html`<button class="resume" onClick=${() => act('resume', agentPath(a.id, 'resume'))}>resume</button>`
          : html`<button class="pause" onClick=${() => act('pause', agentPath(a.id, 'pause'))}>pause</button>`}
        <button onClick=${() => act('more time', agentPath(a.id, 'decide'), { decision: 'more_time' })}>more time</button>
        <button onClick=${() => act('hand off', agentPath(a.id, 'decide'), { decision: 'hand_off' })}>hand off</button>
        <button class="danger" onClick=${() => confirm(`Terminate ${a.id}'s current task?`) && act('terminate', agentPath(a.id, 'terminate'), {})}>terminate</button>
      </td></tr>`;
  });
  const pager = state.agentsAfter || state.agentsNext || state.pausedMore ? html`<p class="pager muted">
      paused agents first, then ${state.agentsAfter ? `the agents after ${state.agentsAfter}` : 'the first agents'} by id
      ${state.agentsAfter ? html` <button class="first-page" onClick=${() => agentsPage(null)}>first page</button>` : ''}
      ${state.agentsNext ? html` <button class="next-page" onClick=${() => agentsPage(state.agentsNext)}>next ${AGENTS_PAGE}</button>` : ''}
      ${state.pausedMore ? html` <span class="warn">more than ${PAUSED_SHOWN} paused: <code>hale agent list</code> shows all</span>` : ''}
    </p>` : '';
  return html`<section id="agents"><h2>Agents</h2>
    ${state.agents.length === 0 ? html`<p class="muted">no agents yet</p>` : html`<table>
      <tr><th>agent</th><th>state</th><th>failures in a row</th><th>turns</th><th>tokens / cap</th><th>intervention</th><th></th></tr>
      ${rows}</table>`}${pager}</section>`;
}

function agentsPage(after) {
  state.agentsAfter = after;
  refresh();
}

function Spark({ values }) {
  const ref = (el) => {
    if (!el || !window.uPlot) return;
    const ys = values.map((v) => (v == null ? null : v * 100));
    const xs = ys.map((_, i) => i);
    if (el._plot) { el._plot.setData([xs, ys]); return; }
    el._plot = new window.uPlot({
      width: 120, height: 28, legend: { show: false }, cursor: { show: false },
      axes: [{ show: false }, { show: false }], scales: { x: { time: false }, y: { range: [0, 100] } },
      series: [{}, { stroke: '#3fb950', width: 1.5, spanGaps: true, points: { show: false } }],
    }, [xs, ys], el);
  };
  return html`<span class="spark" ref=${ref}></span>`;
}

function Deployments() {
  return html`<section id="deployments"><h2>Deployments</h2><table>
    <tr><th>deployment</th><th>health</th><th>ejected for</th><th>success</th><th>recent</th><th></th></tr>
    ${state.deployments.map((d) => {
      const key = d.deployment || `${d.provider}/${d.model}`;
      const [prov, ...rest] = key.split('/');
      const model = encodeURIComponent(rest.join('/'));
      return html`<tr data-deployment=${key}>
        <td>${key}</td>
        <td>${stateBadge(d.forced ? 'tripped' : d.health || 'unknown')}
          ${Object.entries(d.breakers || {}).filter(([, b]) => b !== 'closed').map(([agent, b]) => html` <span class="muted">breaker ${agent}:</span> ${stateBadge(b)}`)}</td>
        <td>${d.ejected_remaining_ms ? fmtMs(d.ejected_remaining_ms) : '—'}</td>
        <td>${pct(d.success_ratio)}</td>
        <td><${Spark} values=${state.spark[key] || []} /></td>
        <td>${d.forced
          ? html`<button onClick=${() => act('reset', `/deployments/${prov}/${model}/reset`)}>reset</button>`
          : html`<button class="danger" onClick=${() => act('trip', `/deployments/${prov}/${model}/trip`)}>trip</button>`}</td>
      </tr>`;
    })}</table></section>`;
}

function Nodes() {
  if (state.nodes === null) return '';
  return html`<section id="nodes"><h2>Tool nodes</h2>
    ${state.nodes.length === 0 ? html`<p class="muted">no tool nodes</p>` : html`<table>
    <tr><th>node</th><th>kind</th><th>health</th><th>breaker</th><th>tools</th></tr>
    ${state.nodes.map((n) => html`<tr><td>${n.name}</td><td>${n.kind}</td>
      <td>${stateBadge(n.health || n.state || 'unknown')}</td>
      <td>${n.breaker ? stateBadge(n.breaker.state || n.breaker) : '—'}</td>
      <td class="muted">${(n.tools || []).map((t) => t.name || t).join(', ')}</td></tr>`)}
    </table>`}</section>`;
}

function Sinks() {
  return html`<section id="sinks"><h2>Event sinks</h2>
    ${state.sinks.length === 0 ? html`<p class="muted">only the in-process stream</p>` : html`<table>
    <tr><th>sink</th><th>state</th><th>backlog</th><th>oldest undelivered</th><th>dead letters</th></tr>
    ${state.sinks.map((s) => html`<tr><td>${s.name}</td><td>${stateBadge(s.state)}</td><td>${s.backlog}</td>
      <td>${fmtMs(s.oldest_undelivered_age_ms ?? (s.oldest_undelivered_age_seconds != null ? s.oldest_undelivered_age_seconds * 1000 : null))}</td>
      <td>${s.dead_letters ?? 0}</td></tr>`)}</table>`}
    <h2 style="margin-top:10px">Dead letters</h2>
    ${state.dlq.length === 0 ? html`<p class="muted">none</p>` : html`
      <button onClick=${() => act('replay', '/dlq/replay', { all: true })}>replay all</button>
      <table><tr><th>event</th><th>sink</th><th>error</th><th></th></tr>
      ${state.dlq.map((d) => html`<tr><td>${d.kind || ''} <span class="muted">${d.id}</span></td><td>${d.sink}</td>
        <td class="muted">${d.last_error || d.error || ''}</td>
        <td><button onClick=${() => act('replay', '/dlq/replay', { ids: [d.id] })}>replay</button></td></tr>`)}
      </table>`}</section>`;
}

function Events() {
  const kind = state.filterKind.trim();
  const agent = state.filterAgent.trim();
  const shown = state.events.filter((e) => (!kind || e.kind.startsWith(kind)) && (!agent || e.agent === agent));
  return html`<section id="events" class="wide"><h2>Events ${state.live ? html`<span class="ok">● live</span>` : html`<span class="warn">○ reconnecting</span>`}</h2>
    <div class="filters">
      <input placeholder="kind (prefix)" value=${state.filterKind} onInput=${(e) => { state.filterKind = e.target.value; rerender(); }} />
      <input placeholder="agent" value=${state.filterAgent} onInput=${(e) => { state.filterAgent = e.target.value; rerender(); }} />
      <span class="muted">${shown.length} of ${state.events.length}</span>
    </div>
    <div class="events">${shown.slice().reverse().map((e) => html`<div data-kind=${e.kind}>
      <span class="muted">${fmtTime(e.time_ms)}</span> <b>${e.kind}</b>
      ${e.agent ? html` agent=${e.agent}` : ''}${e.task ? html` task=${e.task}` : ''}
      ${e.turn ? html` <a class="turn" onClick=${() => openTurn(e.turn)}>turn ${e.turn}</a>` : ''}
      <span class="muted"> ${JSON.stringify(e.payload || {})}</span></div>`)}</div></section>`;
}

function Turn() {
  if (!state.turnId) return '';
  const t = state.turn;
  let body;
  if (!t) body = html`<p class="muted">loading…</p>`;
  else if (t.error) body = html`<p class="error">${typeof t.error === 'string' ? t.error : JSON.stringify(t.error)}</p>`;
  else {
    const attempts = t.timeline || t.attempts || [];
    const cols = [...new Set(attempts.flatMap((a) => Object.keys(a)))];
    body = html`<div class="timeline">
      <p>status <b>${t.status || '—'}</b> · agent ${t.agent || '—'} · task ${t.task || '—'}
        ${t.compacted ? html` · <span class="warn">compacted</span>` : ''}</p>
      <table id="turn-attempts"><tr>${cols.map((c) => html`<th>${c}</th>`)}</tr>
      ${attempts.map((a) => html`<tr>${cols.map((c) => html`<td>${typeof a[c] === 'object' && a[c] !== null ? JSON.stringify(a[c]) : String(a[c] ?? '')}</td>`)}</tr>`)}
      </table></div>`;
  }
  return html`<section id="turn" class="wide"><h2>Turn ${state.turnId} <button onClick=${() => { state.turnId = ''; rerender(); }}>close</button></h2>${body}</section>`;
}

function History() {
  const h = state.history;
  if (!h) return '';
  const minutes = h.minutes || [];
  const byDep = {};
  for (const m of minutes) (byDep[m.deployment] ||= []).push(m);
  const transitions = h.transitions || [];
  return html`<section id="history" class="wide"><h2>History (24 h)</h2>
    ${Object.keys(byDep).length === 0 ? html`<p class="muted">no per-minute figures yet</p>`
      : Object.entries(byDep).map(([dep, ms]) => html`<div class="chart"><div>${dep}</div><${HistoryChart} rows=${ms} from=${h.from} to=${h.to} /></div>`)}
    ${transitions.length ? html`<table><tr><th>time</th><th>what</th><th>subject</th></tr>
      ${transitions.slice(-50).reverse().map((t) => html`<tr><td>${fmtTime(t.time_ms)}</td><td>${t.kind || t.to || ''}</td>
        <td>${t.agent || t.deployment || t.subject || ''}</td></tr>`)}</table>` : ''}
  </section>`;
}

function HistoryChart({ rows, from, to }) {
  const ref = (el) => {
    if (!el || !window.uPlot) return;
    const xs = rows.map((r) => Math.floor(r.minute_ms / 1000));
    const ratio = rows.map((r) => (r.success_ratio == null ? null : r.success_ratio * 100));
    const lat = rows.map((r) => r.p50_ms ?? r.avg_ms ?? null);
    const data = [xs, ratio, lat];
    if (el._plot) { el._plot.setData(data); return; }
    el._plot = new window.uPlot({
      width: Math.max(400, el.clientWidth || 900), height: 160,
      // The x axis spans the whole window asked for, however few minutes have figures.
      scales: { x: { time: true, range: () => [Math.floor(from / 1000), Math.ceil(to / 1000)] },
        y: { range: [0, 100] } },
      series: [{}, { label: 'success %', stroke: '#3fb950', scale: 'y' },
        { label: 'latency ms', stroke: '#58a6ff', scale: 'ms' }],
      axes: [{ stroke: '#8593a3' }, { scale: 'y', stroke: '#8593a3' }, { scale: 'ms', side: 1, stroke: '#8593a3' }],
    }, data, el);
  };
  return html`<div ref=${ref}></div>`;
}

function Login() {
  return html`<form class="login" onSubmit=${login}>
    <h1>hale</h1>
    <p>This gateway has keys configured: the dashboard needs an admin key. It is kept in this tab only (session storage).</p>
    <input name="token" type="password" placeholder="admin token" autocomplete="off" />
    <button type="submit">open the dashboard</button>
    ${state.loginError ? html`<p class="error">${state.loginError}</p>` : ''}
  </form>`;
}

function App() {
  if (state.needLogin) return html`<${Login} />`;
  return html`<header><h1>hale</h1>
      <span class="live">${state.busy ? `${state.busy}…` : `updated ${fmtTime(state.agentsAt)}`}</span>
      ${state.error ? html`<span class="error" id="error">${state.error}</span>` : ''}
      <span style="flex:1"></span>${token() ? html`<button onClick=${logout}>forget token</button>` : ''}</header>
    <main><${Agents} /><${Deployments} /><${Turn} /><${Nodes} /><${Sinks} /><${Events} /><${History} /></main>`;
}

const root = document.getElementById('app');
root.textContent = '';
function rerender() { render(html`<${App} />`, root); }

let started = false;
function start() {
  refresh();
  refreshHistory();
  streamEvents();
  if (!started) {
    started = true;
    setInterval(refresh, POLL_MS);
    setInterval(refreshHistory, 60000);
    setInterval(rerender, 1000); // countdowns
  }
}
start();
