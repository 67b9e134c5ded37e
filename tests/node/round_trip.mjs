// MQTT.js round trip, run by tests/integration/test_mqttjs.py:
//   node round_trip.mjs <url> <protocolVersion> [cafile]
// A subscriber and a publisher connect to <url> (ws:// or wss://, CA from cafile),
// 20 QoS 1 messages go from one to the other; prints what arrived as one JSON line and
// exits 0, or prints the error and exits 1.
import { readFileSync } from "node:fs";
import mqtt from "mqtt";

const [url, version, cafile] = process.argv.slice(2);
const options = {
  protocolVersion: Number(version),
  reconnectPeriod: 0,
  connectTimeout: 5000,
  ...(cafile ? { ca: readFileSync(cafile) } : {}),
};
const fail = (error) => {
  console.error(String(error));
  process.exit(1);
};
setTimeout(() => fail("timed out"), 15000).unref();

const connect = (clientId) =>
  new Promise((resolve, reject) => {
    const client = mqtt.connect(url, { ...options, clientId });
    client.once("connect", () => resolve(client));
    client.once("error", reject);
  });

try {
  const sub = await connect(`js-sub-${version}`);
  const got = [];
  const done = new Promise((resolve) => {
    sub.on("message", (topic, payload) => {
      got.push([topic, payload.toString()]);
      if (got.length === 20) resolve();
    });
  });
  await sub.subscribeAsync("js/+", { qos: 1 });
  const pub = await connect(`js-pub-${version}`);
  for (let i = 0; i < 20; i++) {
    await pub.publishAsync(`js/${i % 2}`, `m${i}`, { qos: 1 });
  }
  await done;
  await Promise.all([sub.endAsync(), pub.endAsync()]);
  console.log(JSON.stringify(got));
  process.exit(0);
} catch (error) {
  fail(error);
}
