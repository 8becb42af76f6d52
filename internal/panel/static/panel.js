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
      if (link) {
        link.replaceChildren(Object.assign(document.createElement("span"), {
          className: d.connected ? "ok" : "off", textContent: d.connected ? "connected" : "offline" }));
      }
      for (const [field, value] of [["seen", d.seen], ["standing", d.standing], ["replica", d.replica]]) {
        const cell = row.querySelector(`[data-field="${field}"]`);
        if (cell) cell.textContent = value;
      }
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

function liveTail(pre) {
  const es = new EventSource(pre.dataset.tail);
  signedOut(es, pre);
  const state = document.getElementById("job-state");
  es.addEventListener("output", (ev) => {
    const o = JSON.parse(ev.data);
    let text = pre.textContent + decode(o.data, o.encoding);
    if (text.length > TAIL_CHARS) text = text.slice(text.length - TAIL_CHARS);
    pre.textContent = text;
    pre.scrollTop = pre.scrollHeight;
  });
  es.addEventListener("state", (ev) => { if (state) state.textContent = JSON.parse(ev.data).state; });
  es.addEventListener("end", (ev) => {
    if (state) state.textContent = JSON.parse(ev.data).state;
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
