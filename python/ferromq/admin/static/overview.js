// The node panel: health from /readyz (every MQTT listener open, the store taking
// writes) and /healthz (version, uptime), gauges from /api/v1/stats, and the rates
// chart. One poll a second, each started when the last one ended, so a slow broker
// is never asked twice at once.

import { api, request } from "./api.js";
import { drawChart } from "./chart.js";
import { byId, el } from "./dom.js";
import { RATES, RateHistory } from "./rates.js";

const POLL_MS = 1000;
const GAUGES = [
  ["clients_connected", "clients connected"],
  ["subscriptions", "subscriptions"],
  ["retained_messages", "retained messages"],
  ["messages_queued", "messages queued"],
  ["messages_inflight", "messages in flight"],
];

function duration(seconds) {
  const days = Math.floor(seconds / 86400);
  const hours = Math.floor((seconds % 86400) / 3600);
  const minutes = Math.floor((seconds % 3600) / 60);
  if (days) return `${days}d ${hours}h`;
  return hours ? `${hours}h ${minutes}m` : `${minutes}m ${seconds % 60}s`;
}

function number(value) {
  return value.toLocaleString("en", { maximumFractionDigits: 1 });
}

function showHealth(ready, live) {
  const status = byId("health-status");
  status.textContent = ready.status;
  status.className = `badge ${ready.status === "ready" ? "good" : "bad"}`;
  byId("health-version").textContent = `ferromq ${live.version}`;
  byId("health-uptime").textContent = `up ${duration(live.uptime_seconds)}`;
  const listeners = Object.entries(ready.listeners).map(([name, open]) =>
    el("li", { textContent: `listener ${name}: ${open ? "open" : "closed"}` }),
  );
  const store = ready.store;
  const storeText = store.state === "none" ? "no store" : `store: ${store.state}`;
  const storeError = store.last_error ? ` (${store.errors} errors, last: ${store.last_error})` : "";
  byId("health-detail").replaceChildren(...listeners, el("li", { textContent: storeText + storeError }));
}

function showGauges(stats, rates) {
  const cards = GAUGES.map(([key, text]) => [text, stats[key]]);
  if (rates !== null) cards.unshift(...RATES.map((rate) => [rate.label, rates[rate.key]]));
  byId("gauges").replaceChildren(
    ...cards.map(([text, value]) =>
      el("div", { className: "card" }, el("strong", { textContent: number(value) }), el("span", { textContent: text })),
    ),
  );
}

function legend() {
  byId("rate-legend").replaceChildren(
    ...RATES.map(({ label, color }) => {
      const swatch = el("span", { className: "swatch" });
      swatch.style.background = color;
      return el("li", {}, swatch, label);
    }),
  );
}

// Poll until the page goes; `onError` gets what a poll threw (an Unauthorized
// stops the polling: app.js asks for the token and starts it again).
export function startOverview(onError) {
  const history = new RateHistory();
  const canvas = byId("rate-chart");
  legend();
  let stopped = false;
  async function poll() {
    try {
      const [ready, live, stats] = await Promise.all([
        request("GET", "/readyz", { accept: [503] }),
        request("GET", "/healthz"),
        api("GET", "/stats"),
      ]);
      showHealth(ready, live);
      showGauges(stats, history.add(stats, performance.now()));
      drawChart(canvas, history.series, history.capacity);
      byId("overview-error").textContent = "";
    } catch (error) {
      byId("overview-error").textContent = error.message;
      onError(error);
    }
    if (!stopped) setTimeout(poll, POLL_MS);
  }
  poll();
  return () => {
    stopped = true;
  };
}
