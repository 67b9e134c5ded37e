// Live rates from the broker's counters. The page reads /api/v1/stats about once a
// second; a rate is a counter's rise between two reads over the time between them
// (the counters are the engine's totals, so nothing is counted for the page). A
// counter that falls (the broker restarted) counts as no rise.

export const RATES = [
  { key: "publish_received", label: "messages in/s", color: "#2b7bb9" },
  { key: "publish_sent", label: "messages out/s", color: "#d9622b" },
  { key: "connections_opened", label: "connections/s", color: "#2e9a5a" },
];

export class RateHistory {
  // The last `capacity` rates of each of RATES.
  constructor(capacity = 120) {
    this.capacity = capacity;
    this.previous = null;
    this.series = RATES.map((rate) => ({ ...rate, values: [] }));
  }

  // One read of the counters at `time` (ms); the rates it gives, or null for the
  // first read.
  add(stats, time) {
    const previous = this.previous;
    this.previous = { stats, time };
    if (previous === null) return null;
    const seconds = (time - previous.time) / 1000;
    const rates = {};
    for (const series of this.series) {
      const rise = Math.max(0, stats[series.key] - previous.stats[series.key]);
      const rate = seconds > 0 ? rise / seconds : 0;
      series.values.push(rate);
      if (series.values.length > this.capacity) series.values.shift();
      rates[series.key] = rate;
    }
    return rates;
  }
}
