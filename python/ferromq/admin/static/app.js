// The dashboard's entry point: asks for the admin token when the listener needs one
// (/dashboard/settings.json says so before any API call could fail), keeps it in
// sessionStorage, and starts the panels: node health and rates (overview.js), the
// cluster's nodes on a clustered node (cluster.js), the clients, sessions and
// subscriptions tables (lists.js), the retained browser, the
// publish form and, with a WebSocket listener, the MQTT panel. A 401 from any of them
// stops the polling and asks for the token again.

import { api, forgetToken, request, setToken, token, Unauthorized } from "./api.js";
import { startCluster } from "./cluster.js";
import { byId, showError } from "./dom.js";
import { LISTS } from "./lists.js";
import { startOverview } from "./overview.js";
import { startPublish } from "./publish.js";
import { startRetained } from "./retained.js";
import { PagedTable } from "./table.js";
import { startWsPanel } from "./ws-panel.js";

let stopOverview = null;
let stopCluster = null;
let panels = null; // the refresh of each panel, once built

function askToken(message) {
  stopOverview?.();
  stopOverview = null;
  stopCluster?.();
  stopCluster = null;
  forgetToken();
  byId("main").hidden = true;
  byId("forget-token").hidden = true;
  byId("login").hidden = false;
  showError(byId("login-error"), message);
  byId("token-input").focus();
}

function onError(error) {
  if (error instanceof Unauthorized) askToken("The admin token was refused: enter it again.");
}

function build() {
  const tables = LISTS.map((spec) => new PagedTable(byId(spec.name), spec, onError));
  startPublish(onError);
  startWsPanel(onError);
  return [...tables.map((table) => () => table.refresh()), startRetained(onError)];
}

function show() {
  byId("login").hidden = true;
  byId("main").hidden = false;
  byId("forget-token").hidden = token() === null;
  stopOverview = startOverview(onError);
  stopCluster = startCluster(onError);
  panels ??= build();
  for (const refresh of panels) refresh();
}

async function login(event) {
  event.preventDefault();
  setToken(byId("token-input").value);
  try {
    await api("GET", "/stats");
  } catch (error) {
    if (error instanceof Unauthorized) askToken("That token was refused.");
    else showError(byId("login-error"), error.message);
    return;
  }
  byId("token-input").value = "";
  show();
}

async function main() {
  byId("login").addEventListener("submit", login);
  byId("forget-token").addEventListener("click", () => askToken(""));
  const settings = await request("GET", "/dashboard/settings.json");
  if (settings.token_required && token() === null) askToken("");
  else show();
}

main();
