// The admin API as the page uses it: JSON over fetch, with the operator's bearer
// token (kept in sessionStorage, so it lasts as long as the tab and no longer).
// A 401 is an Unauthorized error, which app.js answers by asking for the token again;
// any other refusal is an ApiError carrying the API's one-line {"error": "..."}.

const TOKEN_KEY = "ferromq.admin.token";

export class Unauthorized extends Error {}

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  sessionStorage.setItem(TOKEN_KEY, value);
}

export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

// `method path` on the admin listener; resolves to the JSON answer (null when
// empty) when the status is 2xx or among `accept` (a 503 /readyz is an answer too).
export async function request(method, path, { body, accept = [] } = {}) {
  const headers = {};
  const bearer = token();
  if (bearer !== null) headers.Authorization = `Bearer ${bearer}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 401) throw new Unauthorized("the admin token was refused");
  const text = await response.text();
  const data = text ? JSON.parse(text) : null;
  if (!response.ok && !accept.includes(response.status)) {
    throw new ApiError(response.status, data?.error ?? `${response.status} ${response.statusText}`);
  }
  return data;
}

// `method /api/v1<path>`.
export function api(method, path, options) {
  return request(method, `/api/v1${path}`, options);
}

// A query string of the parameters that have a value ("" and null are left out).
export function query(params) {
  const given = Object.entries(params).filter(([, v]) => v !== "" && v !== null && v !== undefined);
  return given.length ? `?${new URLSearchParams(given)}` : "";
}
