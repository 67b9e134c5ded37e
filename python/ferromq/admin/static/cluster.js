// The Cluster panel, shown only on a clustered node ([cluster]): every node of the
// cluster with its state (alive, dead, adopted by a survivor) from /api/v1/cluster,
// this node's cluster traffic, and the alive nodes' clients and messages added up. /readyz says first whether the node is clustered
// (its "cluster" is "off" when not: the panel stays hidden, nothing more is asked);
// then one poll every two seconds, each started when the last one ended.

import { api, request } from "./api.js";
import { byId, el } from "./dom.js";

const POLL_MS = 2000;
const STATE_CLASS = { alive: "good", dead: "bad", adopted: "" };
const TOTALS = [
  ["clients_connected", "clients connected"],
  ["subscriptions", "subscriptions"],
  ["publish_received", "messages received"],
  ["publish_sent", "messages sent"],
];
const FIGURES = [
  ["batches_sent", "batches sent"],
  ["batches_received", "batches received"],
  ["bytes_sent", "bytes sent"],
  ["bytes_received", "bytes received"],
  ["remote_filters", "remote filters"],
  ["held_acks", "acks held"],
];

function row(node, me) {
  const state = el("span", { className: `badge ${STATE_CLASS[node.state]}`, textContent: node.state });
  const started = new Date(node.started * 1000).toISOString().slice(0, 19).replace("T", " ");
  const cells = [
    node.node_id === me ? `${node.node_id} (this node)` : node.node_id,
    state,
    started,
    node.mqtt.join(", "),
    node.admin ?? "-",
    node.adopted_by ?? "-",
  ];
  return el("tr", { dataset: { node: node.node_id } }, ...cells.map((cell) => el("td", {}, cell)));
}

function show(cluster) {
  byId("cluster").hidden = false;
  byId("cluster-nodes").querySelector("tbody").replaceChildren(
    ...cluster.nodes.map((node) => row(node, cluster.node_id)),
  );
  const figures = cluster.figures;
  const kafka = `Kafka: ${figures.kafka_healthy ? "up" : "failing"}`;
  byId("cluster-figures").replaceChildren(
    el("li", { textContent: kafka }),
    ...FIGURES.map(([key, text]) => el("li", { textContent: `${text}: ${figures[key].toLocaleString("en")}` })),
  );
  byId("cluster-totals").replaceChildren(
    ...TOTALS.map(([key, text]) => el("li", { textContent: `${text}: ${(cluster.totals[key] ?? 0).toLocaleString("en")}` })),
  );
}

async function clustered() {
  const ready = await request("GET", "/readyz", { accept: [503] });
  return (ready.cluster?.state ?? "off") !== "off";
}

// Poll until stopped, on a clustered node; `onError` gets what a poll threw (an
// Unauthorized: app.js stops the polling, asks for the token, starts it again).
export function startCluster(onError) {
  let stopped = false;
  async function poll() {
    try {
      show(await api("GET", "/cluster"));
      byId("cluster-error").textContent = "";
    } catch (error) {
      byId("cluster-error").textContent = error.message;
      onError(error);
    }
    if (!stopped) setTimeout(poll, POLL_MS);
  }
  clustered().then(
    (yes) => {
      if (yes && !stopped) poll();
    },
    onError,
  );
  return () => {
    stopped = true;
  };
}
