// Building the page's elements without innerHTML: text is always set as text, so
// client ids, topics and payloads cannot inject markup.

// <tag> with properties (`className`, `textContent`, `type`, ...), `on` event
// handlers, `dataset` entries, and children (nodes or strings).
export function el(tag, props = {}, ...children) {
  const { on = {}, dataset = {}, ...rest } = props;
  const node = Object.assign(document.createElement(tag), rest);
  Object.assign(node.dataset, dataset);
  for (const [event, handler] of Object.entries(on)) node.addEventListener(event, handler);
  node.append(...children);
  return node;
}

export function byId(id) {
  const node = document.getElementById(id);
  if (node === null) throw new Error(`no element #${id}`);
  return node;
}

// Show `message` in `node` as an error (or clear it with "").
export function showError(node, message) {
  node.textContent = message;
  node.classList.toggle("error", message !== "");
}

// `callback` once `ms` have passed without another call.
export function debounce(callback, ms) {
  let timer;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => callback(...args), ms);
  };
}
