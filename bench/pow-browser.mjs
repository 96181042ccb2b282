// Times the waiting-room page's proof-of-work Web Worker in headless Chromium.
//   node bench/pow-browser.mjs <index.html> <difficulty> <challenges>
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const require = createRequire(join(dirname(fileURLToPath(import.meta.url)), "../tests/browser/package.json"));
const { chromium } = require("playwright-core");
const [page_file, difficulty, count] = process.argv.slice(2);
const html = readFileSync(page_file, "utf8");
const open = '<script type="text/plain" id="pow-worker">';
const source = html.slice(html.indexOf(open) + open.length, html.indexOf("</script>", html.indexOf(open)));
const challenges = Array.from({ length: Number(count) }, () => randomBytes(37).toString("hex"));

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const page = await browser.newPage();
  const times = await page.evaluate(async ({ source, challenges, difficulty }) => {
    const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
    const out = [];
    for (const challenge of challenges) {
      const started = performance.now();
      await new Promise((resolve) => {
        const w = new Worker(url);
        w.onmessage = () => { w.terminate(); resolve(); };
        w.postMessage({ challenge, difficulty });
      });
      out.push(performance.now() - started);
    }
    return out;
  }, { source, challenges, difficulty: Number(difficulty) });
  times.sort((a, b) => a - b);
  const at = (q) => times[Math.min(times.length - 1, Math.floor(q * times.length))];
  console.log(`solve at ${difficulty} bits in headless Chromium (the page's worker, ${times.length} challenges): ` +
    `median ${at(0.5).toFixed(0)} ms, p90 ${at(0.9).toFixed(0)} ms, max ${times[times.length - 1].toFixed(0)} ms (goal <= 1000 ms)`);
} finally {
  await browser.close();
}
