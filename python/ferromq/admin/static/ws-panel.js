// The MQTT-over-WebSocket panel, shown when the broker has a ws or wss listener
// (GET /api/v1/listeners): connect to it from the browser with mqtt-ws.js, subscribe,
// publish, and watch what arrives (the newest MAX_MESSAGES).

import { api } from "./api.js";
import { byId, el, showError } from "./dom.js";
import { MqttWsClient } from "./mqtt-ws.js";

const MAX_MESSAGES = 200;

// The URL of a WebSocket listener as this page reaches it: a wildcard host means
// the host the page came from.
export function listenerUrl(listener, pageHost = location.hostname) {
  let host = ["0.0.0.0", "::", ""].includes(listener.host) ? pageHost : listener.host;
  if (host.includes(":") && !host.startsWith("[")) host = `[${host}]`;
  return `${listener.protocol}://${host}:${listener.port}${listener.path}`;
}

function text(bytes) {
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    return `(hex) ${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
  }
}

function randomId() {
  const bytes = crypto.getRandomValues(new Uint8Array(4));
  return `dashboard-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

export async function startWsPanel(onError) {
  let listeners;
  try {
    listeners = (await api("GET", "/listeners")).items.filter((l) => ["ws", "wss"].includes(l.protocol));
  } catch (error) {
    onError(error);
    return;
  }
  if (listeners.length === 0) return;
  const status = byId("ws-status");
  const connectButton = byId("ws-connect");
  const inbox = byId("ws-messages").tBodies[0];
  const connectedOnly = byId("ws-session");
  byId("ws-url").value = listenerUrl(listeners[0]);
  byId("ws-url-choices").replaceChildren(...listeners.map((l) => el("option", { value: listenerUrl(l) })));
  byId("ws-client-id").value = randomId();
  byId("ws-panel").hidden = false;
  let client = null;

  function setStatus(message, error = false) {
    showError(status, error ? message : "");
    status.textContent = message;
  }

  function disconnected(reason) {
    client = null;
    connectedOnly.disabled = true;
    connectButton.textContent = "Connect";
    setStatus(reason);
  }

  function received({ topic, payload, qos, retain }) {
    const time = new Date().toLocaleTimeString();
    const row = el(
      "tr",
      {},
      ...[time, topic, text(payload), String(qos), retain ? "yes" : "no"].map((t) => el("td", { textContent: t })),
    );
    inbox.prepend(row);
    while (inbox.rows.length > MAX_MESSAGES) inbox.lastElementChild.remove();
  }

  async function action(work) {
    try {
      setStatus(await work());
    } catch (error) {
      setStatus(error.message, true);
    }
  }

  byId("ws-connect-form").addEventListener("submit", (event) => {
    event.preventDefault();
    if (client !== null) {
      client.disconnect();
      return;
    }
    const clientId = byId("ws-client-id").value;
    setStatus("connecting…");
    action(async () => {
      client = await MqttWsClient.connect(byId("ws-url").value, {
        clientId,
        username: byId("ws-username").value,
        password: byId("ws-password").value,
      });
      client.onmessage = received;
      client.onclose = disconnected;
      connectedOnly.disabled = false;
      connectButton.textContent = "Disconnect";
      return `connected as ${clientId}`;
    });
  });

  byId("ws-subscribe-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const filter = byId("ws-sub-filter").value;
    action(async () => {
      const granted = await client.subscribe(filter, Number(byId("ws-sub-qos").value));
      byId("ws-subscriptions").append(el("li", { textContent: `${filter} (QoS ${granted})` }));
      return `subscribed to ${filter}`;
    });
  });

  byId("ws-publish-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const topic = byId("ws-pub-topic").value;
    action(async () => {
      await client.publish(topic, byId("ws-pub-payload").value, {
        qos: Number(byId("ws-pub-qos").value),
        retain: byId("ws-pub-retain").checked,
      });
      return `published to ${topic}`;
    });
  });
}
