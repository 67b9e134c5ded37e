// The publish form: POST /api/v1/publish as the broker itself publishes (QoS 0, 1 or
// 2, retain); the answer says how many subscribers it reached.

import { api } from "./api.js";
import { byId, showError } from "./dom.js";

export function startPublish(onError) {
  const form = byId("publish-form");
  const result = byId("publish-result");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = {
      topic: byId("publish-topic").value,
      payload: byId("publish-payload").value,
      qos: Number(byId("publish-qos").value),
      retain: byId("publish-retain").checked,
    };
    try {
      const answer = await api("POST", "/publish", { body });
      showError(result, "");
      result.textContent = `published to ${body.topic}: delivered to ${answer.delivered} subscriber(s)`;
    } catch (error) {
      showError(result, error.message);
      onError(error);
    }
  });
}
