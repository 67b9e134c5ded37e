// A table of one of the API's paged lists (clients, sessions, subscriptions) whose
// search fields are the API's own query parameters. The API pages in session-slot
// order and a page may be short, even empty (one call examines a bounded number of
// sessions), so a view follows `next` until it holds a page of rows or meets the end,
// in at most MAX_CALLS requests; "More" carries on from where it stopped. A search
// answered after a newer one started is dropped.

import { api, query } from "./api.js";
import { debounce, el, showError } from "./dom.js";

const PAGE = 50;
const MAX_CALLS = 20;

function cell(value) {
  if (value === null || value === undefined) return "–";
  if (typeof value === "boolean") return value ? "yes" : "no";
  return String(value);
}

function searchField(name, { param, label, choices }) {
  const id = `${name}-${param}`;
  const input = choices
    ? el("select", { id, name: param }, ...choices.map(([value, text]) => el("option", { value, textContent: text })))
    : el("input", { id, name: param, type: "search", placeholder: label, autocomplete: "off" });
  return el("label", {}, `${label} `, input);
}

export class PagedTable {
  // `spec`: { name, path, columns: [[key, heading]], searches: [{ param, label,
  // choices? }], actions?: (row, table) => [elements] }; `onError` sees a 401.
  constructor(root, spec, onError) {
    this.spec = spec;
    this.onError = onError;
    this.cursor = null;
    this.generation = 0;
    const { name, columns, searches } = spec;
    this.form = el(
      "form",
      { className: "search", id: `${name}-search`, on: { submit: (event) => event.preventDefault() } },
      ...searches.map((search) => searchField(name, search)),
      el("button", { id: `${name}-refresh`, type: "button", textContent: "Refresh", on: { click: () => this.refresh() } }),
    );
    const refreshSoon = debounce(() => this.refresh(), 250);
    this.form.addEventListener("input", refreshSoon);
    const headings = columns.map(([, heading]) => el("th", { textContent: heading }));
    if (spec.actions) headings.push(el("th"));
    this.body = el("tbody");
    this.status = el("p", { className: "status", id: `${name}-status` });
    this.moreButton = el("button", { id: `${name}-more`, type: "button", textContent: "More", hidden: true });
    this.moreButton.addEventListener("click", () => this.load(false));
    root.append(
      this.form,
      el("div", { className: "scroll" }, el("table", { id: `${name}-table` }, el("thead", {}, el("tr", {}, ...headings)), this.body)),
      this.status,
      this.moreButton,
    );
  }

  refresh() {
    return this.load(true);
  }

  async load(fromStart) {
    const generation = ++this.generation;
    const filters = Object.fromEntries(new FormData(this.form));
    let cursor = fromStart ? 0 : this.cursor;
    const rows = [];
    try {
      for (let calls = 0; calls < MAX_CALLS && cursor !== null && rows.length < PAGE; calls += 1) {
        const page = await api("GET", `${this.spec.path}${query({ ...filters, cursor, limit: PAGE - rows.length })}`);
        rows.push(...page.items);
        cursor = page.next;
      }
    } catch (error) {
      if (generation === this.generation) showError(this.status, error.message);
      this.onError(error);
      return;
    }
    if (generation !== this.generation) return;
    if (fromStart) this.body.replaceChildren();
    this.body.append(...rows.map((row) => this.row(row)));
    this.cursor = cursor;
    this.moreButton.hidden = cursor === null;
    showError(this.status, "");
    this.status.textContent = `${this.body.rows.length} shown${cursor === null ? "" : ", more to search"}`;
  }

  row(item) {
    const cells = this.spec.columns.map(([key]) => el("td", { textContent: cell(item[key]) }));
    if (this.spec.actions) cells.push(el("td", { className: "actions" }, ...this.spec.actions(item, this)));
    return el("tr", { dataset: { key: item[this.spec.columns[0][0]] } }, ...cells);
  }
}
