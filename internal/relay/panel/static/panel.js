// The panel's live parts, with nothing inline (the CSP allows none): the
// device list follows the devices' links, a job page follows its output.
"use strict";

// signedOut ends a live stream whose session ended and says so above el.
function signedOut(es, el) {
  es.addEventListener("signed_out", (ev) => {
    es.close();
    el.before(Object.assign(document.createElement("p"), { className: "notice", id: "signed-out", textContent: JSON.parse(ev.data).message }));
  });
}

// badge is a state drawn as the pages draw it; tone is one of the
// stylesheet's (live, ok, off, bad), as the server names it.
function badge(text, tone) {
  return Object.assign(document.createElement("span"), { className: `badge ${tone}`, textContent: text });
}

function liveDevices(table) {
  const es = new EventSource("/panel/events/devices");
  signedOut(es, table);
  es.addEventListener("devices", (ev) => {
    let connected = 0;
    for (const d of JSON.parse(ev.data)) {
      if (d.connected) connected++;
      const row = table.querySelector(`tr[data-device="${CSS.escape(d.id)}"]`);
      if (!row) continue;
      const link = row.querySelector('[data-field="link"]');
      if (link) link.replaceChildren(badge(d.connected ? "connected" : "offline", d.connected ? "ok" : "off"));
      const standing = row.querySelector('[data-field="standing"]');
      if (standing) standing.replaceChildren(badge(d.standing, d.standing_tone));
      const seen = row.querySelector('[data-field="seen"]');
      if (seen) seen.replaceChildren(Object.assign(document.createElement("time"), { textContent: d.seen, title: d.seen_at }));
      const replica = row.querySelector('[data-field="replica"]');
      if (replica) replica.textContent = d.replica;
    }
    const count = document.getElementById("connected-count");
    if (count) count.textContent = String(connected);
  });
}

function decode(data, encoding) {
  if (encoding !== "base64") return data;
  const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
  return new TextDecoder().decode(bytes);
}

// At most this much text stays on the page: a tail.
const TAIL_CHARS = 64 * 1024;

// append adds a chunk of one stream to the tail, as text (never as
// markup): stderr in a span of its own, marked, so the streams read apart.
function append(pre, stream, text) {
  const last = pre.lastElementChild;
  if (last && last.dataset.stream === stream) {
    last.textContent += text;
  } else {
    const span = Object.assign(document.createElement("span"), { className: stream === "stderr" ? "err" : "out", textContent: text });
    span.dataset.stream = stream;
    if (stream === "stderr") span.title = "stderr";
    pre.append(span);
  }
  let excess = pre.textContent.length - TAIL_CHARS;
  while (excess > 0 && pre.firstElementChild) {
    const first = pre.firstElementChild;
    if (first.textContent.length <= excess) {
      excess -= first.textContent.length;
      first.remove();
    } else {
      first.textContent = first.textContent.slice(excess);
      excess = 0;
    }
  }
  pre.scrollTop = pre.scrollHeight;
}

// ended shows how the job ended, as the server words it.
function ended(e) {
  const state = document.getElementById("job-state");
  if (state) Object.assign(state, { className: `badge ${e.tone}`, textContent: e.state });
  const at = document.getElementById("job-ended");
  if (at) at.replaceChildren(Object.assign(document.createElement("time"), { textContent: e.ended, title: e.ended_abs }));
  for (const [id, text] of [["job-how", e.how], ["job-took", e.took]]) {
    const el = document.getElementById(id);
    if (el) el.textContent = text;
  }
}

// mark labels a part of the merged tail, once: the history of one stream,
// or what arrived while the page was open.
function mark(pre, marked, part) {
  if (marked.has(part)) return;
  marked.add(part);
  const span = Object.assign(document.createElement("span"), { className: "part", textContent: `── ${part} ──\n` });
  span.dataset.stream = "part";
  if (pre.textContent !== "" && !pre.textContent.endsWith("\n")) span.textContent = "\n" + span.textContent;
  pre.append(span);
}

// views shows the merged tail or the two streams apart, as chosen.
function views(merged, apart) {
  for (const r of document.querySelectorAll('input[name="tail-view"]')) {
    r.addEventListener("change", () => {
      const separate = document.querySelector('input[name="tail-view"]:checked').value === "separate";
      merged.hidden = separate;
      apart.hidden = !separate;
    });
  }
}

function liveTail(pre) {
  const es = new EventSource(pre.dataset.tail);
  signedOut(es, pre);
  const state = document.getElementById("job-state");
  const apart = { stdout: document.getElementById("tail-stdout"), stderr: document.getElementById("tail-stderr") };
  const split = document.getElementById("tail-apart");
  if (split) views(pre, split);
  const marked = new Set();
  es.addEventListener("output", (ev) => {
    const o = JSON.parse(ev.data);
    const text = decode(o.data, o.encoding);
    mark(pre, marked, o.history ? `${o.stream}, the end as kept before this page opened` : "as it reached this page");
    append(pre, o.stream, text);
    if (apart[o.stream]) append(apart[o.stream], o.stream, text);
  });
  es.addEventListener("state", (ev) => {
    const s = JSON.parse(ev.data);
    if (state) Object.assign(state, { className: `badge ${s.tone}`, textContent: s.state });
  });
  es.addEventListener("end", (ev) => {
    ended(JSON.parse(ev.data));
    es.close();
    const stop = document.getElementById("stop");
    if (stop) stop.closest("form").remove();
  });
  es.addEventListener("refused", (ev) => {
    es.close();
    const p = Object.assign(document.createElement("p"), { className: "notice", textContent: JSON.parse(ev.data).message });
    pre.before(p);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  for (const t of document.querySelectorAll("table[data-live-devices]")) liveDevices(t);
  const pre = document.querySelector("pre[data-tail]");
  if (pre) liveTail(pre);
});
