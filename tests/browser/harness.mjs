// What the browser tests here share: Debian's Chromium launched headless, a deadline,
// lines told on stdin, the page watched for errors, policy blocks and requests to
// other origins, axe-core, and the run itself (the browser closed at the end, exit 1
// with the error on any failure).
import { chromium } from "playwright-core";
import { createInterface } from "node:readline";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

// How long one step may wait for the page.
export const STEP = 30_000;

export const fail = (e) => { console.error("FAILED:", e?.stack ?? e?.message ?? e); process.exit(1); };
export const check = (ok, what) => { if (!ok) throw new Error(what); };

// The whole test fails after `seconds`.
export const deadline = (seconds) => setTimeout(() => fail(`took longer than ${seconds} s`), seconds * 1000).unref();

export const launch = () =>
  chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
  }).catch(fail);

// Lines from stdin, in order, whenever they come (stdin is read from the first ask).
let input = null;
const queued = [], waiting = [];
export function nextLine() {
  if (!input) {
    input = createInterface({ input: process.stdin });
    input.on("line", (l) => (waiting.length ? waiting.shift()(l) : queued.push(l)));
  }
  return queued.length ? Promise.resolve(queued.shift()) : new Promise((r) => waiting.push(r));
}
// The next line must start with `want`; returns the rest of it.
export async function expectLine(want) {
  const got = await nextLine();
  if (!got.startsWith(want)) throw new Error(`expected "${want}" on stdin, got "${got}"`);
  return got.slice(want.length).trim();
}

// Runs the test's steps; then closes the browser and stdin. On any error: the browser
// closed, FAILED and exit 1.
export async function run(browser, steps) {
  try {
    await steps();
    await browser.close();
    input?.close();
  } catch (e) {
    await browser.close().catch(() => {});
    fail(e);
  }
}

// Collects into `problems` the page's errors, anything the Content-Security-Policy
// blocked and any request to an origin other than `base`'s; the page keeps the
// policy's violations in window.cspViolations.
export async function watch(page, base, problems) {
  const origin = new URL(base).origin;
  page.on("pageerror", (e) => problems.push("page error: " + e.message));
  page.on("console", (m) => { if (/Content Security Policy|Refused to/.test(m.text())) problems.push("csp: " + m.text()); });
  page.on("request", (r) => {
    const u = new URL(r.url());
    if (u.origin !== origin && !u.protocol.startsWith("data")) problems.push("request elsewhere: " + r.url());
  });
  await page.addInitScript(() => {
    window.cspViolations = [];
    document.addEventListener("securitypolicyviolation", (e) => window.cspViolations.push(e.violatedDirective + " " + e.blockedURI));
  });
}

export async function noProblems(page, problems, what) {
  const csp = await page.evaluate(() => window.cspViolations);
  check(csp.length === 0, `${what}: the policy blocked ${csp.join(", ")}`);
  check(problems.length === 0, `${what}: ${problems.join("; ")}`);
}

// axe-core on the page: fails on a serious or critical violation, returns how many
// violations it found.
let axeSource = null;
export async function axe(page, what) {
  axeSource ??= readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");
  await page.evaluate(axeSource);
  const result = await page.evaluate(async () => {
    const r = await window.axe.run(document, { resultTypes: ["violations"] });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, nodes: v.nodes.map((n) => n.target.join(" ")) }));
  });
  const bad = result.filter((v) => v.impact === "serious" || v.impact === "critical");
  check(bad.length === 0, `${what}: axe-core finds ${JSON.stringify(bad)}`);
  return result.length;
}

export const text = (page, sel) => page.textContent(sel).then((t) => (t ?? "").trim());
