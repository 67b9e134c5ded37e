// The retained-message browser: the messages matching a topic filter (GET
// /retained?filter=, oldest first, page by page), one read in full (GET
// /retained/{topic}: payload as UTF-8 text or base64, QoS, v5 properties) and
// cleared (DELETE /retained/{topic}).

import { api, query } from "./api.js";
import { byId, el, showError } from "./dom.js";

const PAGE = 100;
const PREVIEW = 80;

function path(topic) {
  return `/retained/${encodeURIComponent(topic)}`;
}

function preview(message) {
  const text = message.encoding === "base64" ? `(base64) ${message.payload}` : message.payload;
  return text.length > PREVIEW ? `${text.slice(0, PREVIEW)}…` : text;
}

export function startRetained(onError) {
  const form = byId("retained-form");
  const body = byId("retained-table").tBodies[0];
  const status = byId("retained-status");
  const more = byId("retained-more");
  const detail = byId("retained-detail");
  let cursor = null;

  async function run(action) {
    try {
      await action();
    } catch (error) {
      showError(status, error.message);
      onError(error);
    }
  }

  async function list(fromStart) {
    const filter = byId("retained-filter").value || "#";
    const page = await api("GET", `/retained${query({ filter, cursor: fromStart ? 0 : cursor, limit: PAGE })}`);
    if (fromStart) body.replaceChildren();
    body.append(...page.items.map(row));
    cursor = page.next;
    more.hidden = cursor === null;
    showError(status, "");
    status.textContent = `${body.rows.length} retained message(s) match ${filter}`;
  }

  async function read(topic) {
    const message = await api("GET", path(topic));
    detail.replaceChildren(
      el("h3", { textContent: message.topic }),
      el("p", { textContent: `QoS ${message.qos}, ${message.encoding}` }),
      el("pre", { id: "retained-payload", textContent: message.payload }),
      ...(Object.keys(message.properties).length
        ? [el("pre", { textContent: JSON.stringify(message.properties, null, 2) })]
        : []),
    );
    detail.hidden = false;
  }

  async function remove(topic) {
    if (!window.confirm(`Clear the retained message of ${topic}?`)) return;
    await api("DELETE", path(topic));
    detail.hidden = true;
    await list(true);
  }

  function row(message) {
    const button = (text, action, className = "") =>
      el("button", { type: "button", textContent: text, className, on: { click: () => run(() => action(message.topic)) } });
    return el(
      "tr",
      { dataset: { topic: message.topic } },
      el("td", { textContent: message.topic }),
      el("td", { textContent: preview(message) }),
      el("td", { textContent: String(message.qos) }),
      el("td", { className: "actions" }, button("Read", read), button("Clear", remove, "danger")),
    );
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    run(() => list(true));
  });
  more.addEventListener("click", () => run(() => list(false)));
  return () => run(() => list(true));
}
