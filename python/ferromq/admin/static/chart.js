// A line chart of the recent rates on a <canvas>, drawn in full at each new point
// (120 points of 3 series: nothing worth a library). The y axis runs from 0 to a
// round number above the largest value (1, 2 or 5 times a power of ten); the newest
// point is at the right edge and the x axis spans `capacity` points.

const PAD = { left: 52, right: 10, top: 10, bottom: 10 };
const GRID_LINES = 4;

// The smallest 1, 2 or 5 x 10^n at least `value` (1 for nothing to show).
export function roundCeiling(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  return [1, 2, 5, 10].map((m) => m * power).find((bound) => bound >= value);
}

function fitToDisplay(canvas) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth;
  const height = canvas.clientHeight;
  if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(height * ratio)) {
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
  }
  const context = canvas.getContext("2d");
  context.setTransform(ratio, 0, 0, ratio, 0, 0);
  return { context, width, height };
}

function label(value) {
  return value >= 1000 ? `${value / 1000}k` : String(value);
}

export function drawChart(canvas, series, capacity) {
  const { context, width, height } = fitToDisplay(canvas);
  const plotWidth = width - PAD.left - PAD.right;
  const plotHeight = height - PAD.top - PAD.bottom;
  const top = roundCeiling(Math.max(0, ...series.flatMap((s) => s.values)));
  const y = (value) => PAD.top + plotHeight * (1 - value / top);
  const x = (index, count) => PAD.left + plotWidth * ((capacity - count + index) / (capacity - 1));

  context.clearRect(0, 0, width, height);
  context.font = "11px sans-serif";
  context.textAlign = "right";
  context.textBaseline = "middle";
  context.lineWidth = 1;
  for (let line = 0; line <= GRID_LINES; line += 1) {
    const value = (top * line) / GRID_LINES;
    context.strokeStyle = "#e3e6ea";
    context.beginPath();
    context.moveTo(PAD.left, y(value));
    context.lineTo(width - PAD.right, y(value));
    context.stroke();
    context.fillStyle = "#6b7280";
    context.fillText(label(value), PAD.left - 6, y(value));
  }
  context.lineWidth = 2;
  for (const { values, color } of series) {
    context.strokeStyle = color;
    context.beginPath();
    values.forEach((value, index) => {
      const point = [x(index, values.length), y(value)];
      if (index === 0) context.moveTo(...point);
      else context.lineTo(...point);
    });
    context.stroke();
  }
}
