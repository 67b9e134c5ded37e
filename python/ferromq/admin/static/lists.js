// The clients, sessions and subscriptions tables: which API list each shows, its
// columns, and its searches (the API's own query parameters). A connected client can
// be kicked (DELETE /clients/{id}: v5 DISCONNECT 0x98 Administrative action).

import { api } from "./api.js";
import { el, showError } from "./dom.js";

const CONNECTED = {
  param: "connected",
  label: "state",
  choices: [["", "any"], ["true", "connected"], ["false", "offline"]],
};

function kickButton(client, table) {
  if (!client.connected) return [];
  const kick = async () => {
    if (!window.confirm(`Disconnect ${client.client_id}?`)) return;
    try {
      await api("DELETE", `/clients/${encodeURIComponent(client.client_id)}`);
      await table.refresh();
    } catch (error) {
      showError(table.status, error.message);
      table.onError(error);
    }
  };
  return [el("button", { type: "button", className: "danger", textContent: "Kick", on: { click: kick } })];
}

export const LISTS = [
  {
    name: "clients",
    path: "/clients",
    columns: [
      ["client_id", "client id"],
      ["username", "user"],
      ["connected", "connected"],
      ["peer", "peer"],
      ["protocol", "protocol"],
      ["keep_alive", "keep alive"],
      ["connected_at", "since"],
      ["subscription_count", "subscriptions"],
      ["queued", "queued"],
    ],
    searches: [
      { param: "client_id_contains", label: "client id" },
      { param: "username", label: "user name" },
      CONNECTED,
    ],
    actions: kickButton,
  },
  {
    name: "sessions",
    path: "/sessions",
    columns: [
      ["client_id", "client id"],
      ["connected", "connected"],
      ["client_type", "type"],
      ["expiry_interval", "expiry (s)"],
      ["expires_in", "expires in (s)"],
      ["subscription_count", "subscriptions"],
      ["inflight", "in flight"],
      ["queued", "queued"],
      ["queued_bytes", "queued bytes"],
    ],
    searches: [{ param: "client_id_contains", label: "client id" }, CONNECTED],
  },
  {
    name: "subscriptions",
    path: "/subscriptions",
    columns: [
      ["client_id", "client id"],
      ["filter", "filter"],
      ["qos", "QoS"],
      ["no_local", "no local"],
      ["retain_as_published", "retain as published"],
      ["subscription_id", "subscription id"],
    ],
    searches: [
      { param: "client_id_contains", label: "client id" },
      { param: "filter_contains", label: "filter" },
    ],
  },
];
