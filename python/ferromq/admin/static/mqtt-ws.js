// A minimal MQTT 3.1.1 client over WebSocket, for the dashboard's panel.
//
// MQTT 3.1.1 section 6: packets travel in binary frames under the subprotocol
// "mqtt", and a frame may hold part of a packet or several [MQTT-6.0.0-2], so the
// bytes received are buffered and cut into packets by their fixed header: the type
// and flags byte, then the remaining length as a variable-length integer of 7 bits
// a byte, least significant first, at most 4 bytes (section 2.2.3).
//
// What it speaks: CONNECT (clean session, optional user name and password) and
// CONNACK; SUBSCRIBE and SUBACK, asking for QoS 0 or 1 only, so the broker never
// sends it QoS 2 (a delivery's QoS is at most the granted one [MQTT-3.8.4-6]);
// PUBLISH at QoS 0 and 1 both ways, with PUBACK; PINGREQ every half keep alive, so
// the broker hears from it within the keep alive [MQTT-3.1.2-23]; DISCONNECT. A packet
// it does not expect closes the connection.

const CONNECT = 1;
const CONNACK = 2;
const PUBLISH = 3;
const PUBACK = 4;
const SUBSCRIBE = 8;
const SUBACK = 9;
const PINGREQ = 12;
const PINGRESP = 13;
const DISCONNECT = 14;

const CONNACK_REFUSALS = {
  1: "unacceptable protocol version",
  2: "client identifier rejected",
  3: "server unavailable",
  4: "bad user name or password",
  5: "not authorized",
};
const SUBACK_FAILURE = 0x80;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

export function encodeLength(length) {
  const bytes = [];
  do {
    let byte = length % 128;
    length = Math.floor(length / 128);
    if (length > 0) byte |= 0x80;
    bytes.push(byte);
  } while (length > 0);
  if (bytes.length > 4) throw new RangeError("packet too large for MQTT (256 MiB at most)");
  return bytes;
}

// [length, bytes it took] of the remaining length at `offset`, or null when the
// buffer ends before it does.
export function decodeLength(buffer, offset) {
  let value = 0;
  for (let i = 0; i < 4; i += 1) {
    if (offset + i >= buffer.length) return null;
    const byte = buffer[offset + i];
    value += (byte & 0x7f) * 128 ** i;
    if ((byte & 0x80) === 0) return [value, i + 1];
  }
  throw new Error("malformed remaining length: more than 4 bytes");
}

function concat(parts) {
  const out = new Uint8Array(parts.reduce((total, part) => total + part.length, 0));
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

function u16(value) {
  return [value >> 8, value & 0xff];
}

function mqttString(text) {
  const bytes = encoder.encode(text);
  if (bytes.length > 0xffff) throw new RangeError("string longer than 65,535 bytes");
  return concat([u16(bytes.length), bytes]);
}

function packet(type, flags, ...parts) {
  const body = concat(parts);
  return concat([[(type << 4) | flags, ...encodeLength(body.length)], body]);
}

function connectPacket(clientId, keepAlive, username, password) {
  const named = Boolean(username);
  // A password needs a user name in 3.1.1 [MQTT-3.1.2-22].
  const flags = 0x02 | (named ? 0x80 : 0) | (named && password ? 0x40 : 0);
  const payload = [mqttString(clientId)];
  if (named) payload.push(mqttString(username));
  if (named && password) payload.push(mqttString(password));
  return packet(CONNECT, 0, mqttString("MQTT"), [4, flags], u16(keepAlive), ...payload);
}

export class MqttWsClient {
  // Open `url` and CONNECT as `clientId`; resolves to the client once CONNACK
  // accepts, rejects with why not.
  static connect(url, { clientId = "", keepAlive = 30, username = "", password = "" } = {}) {
    return new Promise((resolve, reject) => {
      const client = new MqttWsClient(new WebSocket(url, "mqtt"), keepAlive);
      client.connecting = { resolve: () => resolve(client), reject };
      client.socket.addEventListener("open", () =>
        client.send(connectPacket(clientId, keepAlive, username, password)),
      );
    });
  }

  constructor(socket, keepAlive) {
    this.socket = socket;
    this.socket.binaryType = "arraybuffer";
    this.keepAlive = keepAlive;
    this.buffer = new Uint8Array(0);
    this.waiting = new Map(); // packet id -> { resolve, reject } of a PUBACK or SUBACK
    this.lastId = 0;
    this.pinger = null;
    this.connecting = null;
    this.onmessage = () => {}; // ({ topic, payload: Uint8Array, qos, retain })
    this.onclose = () => {}; // (reason)
    socket.addEventListener("message", (event) => this.receive(new Uint8Array(event.data)));
    socket.addEventListener("close", (event) => this.closed(event));
  }

  subscribe(filter, qos = 0) {
    const id = this.packetId();
    this.send(packet(SUBSCRIBE, 0x2, u16(id), mqttString(filter), [Math.min(qos, 1)]));
    return this.wait(id).then((granted) => {
      if (granted === SUBACK_FAILURE) throw new Error(`the broker refused the subscription to ${filter}`);
      return granted;
    });
  }

  // Resolves once sent (QoS 0) or acknowledged (QoS 1).
  publish(topic, payload, { qos = 0, retain = false } = {}) {
    const bytes = typeof payload === "string" ? encoder.encode(payload) : payload;
    const parts = [mqttString(topic)];
    const id = qos > 0 ? this.packetId() : 0;
    if (qos > 0) parts.push(u16(id));
    this.send(packet(PUBLISH, (Math.min(qos, 1) << 1) | (retain ? 1 : 0), ...parts, bytes));
    return qos > 0 ? this.wait(id) : Promise.resolve();
  }

  disconnect() {
    this.send(packet(DISCONNECT, 0));
    this.socket.close(1000);
  }

  send(bytes) {
    if (this.socket.readyState === WebSocket.OPEN) this.socket.send(bytes);
  }

  packetId() {
    do {
      this.lastId = (this.lastId % 0xffff) + 1;
    } while (this.waiting.has(this.lastId));
    return this.lastId;
  }

  wait(id) {
    return new Promise((resolve, reject) => this.waiting.set(id, { resolve, reject }));
  }

  receive(bytes) {
    this.buffer = concat([this.buffer, bytes]);
    try {
      while (this.buffer.length >= 2) {
        const length = decodeLength(this.buffer, 1);
        if (length === null) return;
        const start = 1 + length[1];
        const end = start + length[0];
        if (this.buffer.length < end) return;
        const header = this.buffer[0];
        this.handle(header >> 4, header & 0x0f, this.buffer.subarray(start, end));
        this.buffer = this.buffer.subarray(end);
      }
    } catch (error) {
      // A page may close with 1000 or 3000-4999 only; 4000: this client's protocol error.
      this.socket.close(4000, error.message.slice(0, 100));
    }
  }

  handle(type, flags, body) {
    const id = body.length >= 2 ? (body[0] << 8) | body[1] : 0;
    switch (type) {
      case CONNACK:
        return this.connected(body[1]);
      case PUBLISH:
        return this.published(flags, body);
      case PUBACK:
      case SUBACK:
        this.waiting.get(id)?.resolve(body[2]);
        this.waiting.delete(id);
        return undefined;
      case PINGRESP:
        return undefined;
      default:
        throw new Error(`unexpected packet type ${type}`);
    }
  }

  connected(code) {
    const connecting = this.connecting;
    this.connecting = null;
    if (code !== 0) {
      connecting?.reject(new Error(`CONNACK: ${CONNACK_REFUSALS[code] ?? `code ${code}`}`));
      this.socket.close(1000);
      return;
    }
    this.pinger = setInterval(() => this.send(packet(PINGREQ, 0)), (this.keepAlive * 1000) / 2);
    connecting?.resolve();
  }

  published(flags, body) {
    const qos = (flags >> 1) & 0x3;
    if (qos > 1) throw new Error("QoS 2 PUBLISH: this client subscribes at QoS 1 at most");
    const topicEnd = 2 + ((body[0] << 8) | body[1]);
    const topic = decoder.decode(body.subarray(2, topicEnd));
    const payloadStart = qos > 0 ? topicEnd + 2 : topicEnd;
    if (qos === 1) this.send(packet(PUBACK, 0, body.subarray(topicEnd, payloadStart)));
    this.onmessage({ topic, payload: body.slice(payloadStart), qos, retain: (flags & 1) === 1 });
  }

  closed(event) {
    clearInterval(this.pinger);
    const reason = `connection closed (${event.code}${event.reason ? `: ${event.reason}` : ""})`;
    this.connecting?.reject(new Error(reason));
    this.connecting = null;
    for (const { reject } of this.waiting.values()) reject(new Error(reason));
    this.waiting.clear();
    this.onclose(reason);
  }
}
