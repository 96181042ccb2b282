// The back office in headless Chromium: a wrong token refused (and not kept); signed
// in with the keyboard; the counts of the queue moving while a swarm runs, and the
// chart drawing them; a soft cap raised in the settings form; an invalid value shown
// at its field; pause and resume; another queue created by name, found by the
// search and counted, an opening scheduled on it and its commitment shown. axe-core
// finds no serious or critical violation; the Content-Security-Policy blocks nothing.
// Screenshots at desktop and phone widths go to <shots>.
//   node admin.mjs <queue-api URL> <admin token> <shots dir>
// Prints REFUSED, SIGNED_IN; after "swarm" on stdin COUNTS <waiting values>; after
// "cap <n>" SOFT_CAP <n>; INVALID <message>; after "pause" PAUSED; after "resume"
// RESUMED; CHART <points>; AXE <violations>; after "opening <queue>" COMMITMENT <hex>;
// then CLOSED. Exits 1 on any failure (170 s at most).
import { mkdirSync } from "node:fs";
import { STEP, axe, check, deadline, expectLine, launch, noProblems, run, text, watch } from "./harness.mjs";

const [api, token, shots] = process.argv.slice(2);
deadline(170);
mkdirSync(shots, { recursive: true });

const browser = await launch();
const problems = [];

// The numbers shown in the queue's row.
const row = (page, queue) => page.evaluate((q) => {
  const tr = document.querySelector(`#queues tr[data-queue="${q}"]`);
  if (!tr) return null;
  const n = (f) => Number(tr.querySelector(`[data-field="${f}"]`).textContent.replace(/[^\d]/g, ""));
  return { waiting: n("waiting"), ticketsOut: n("ticketsOut"), inside: n("inside"), admission: tr.querySelector('[data-field="admission"]').textContent };
}, queue);

await run(browser, async () => {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await ctx.newPage();
  await watch(page, api, problems);
  await page.goto(api + "/admin", { timeout: STEP });

  // A wrong token: refused, not kept, no cookie.
  await page.fill("#token", "not-the-token");
  await page.press("#token", "Enter");
  await page.waitForFunction(() => /refused/.test(document.getElementById("token-error").textContent), null, { timeout: STEP });
  check(await page.isHidden("#console"), "the console shows after a wrong token");
  check((await page.evaluate(() => sessionStorage.length)) === 0, "a refused token is kept");
  console.log("REFUSED");

  // The right one, with the keyboard: kept in this tab's sessionStorage only.
  await page.focus("#token");
  await page.keyboard.type(token);
  await page.keyboard.press("Enter");
  await page.waitForSelector("#queues tr[data-queue='default']", { timeout: STEP });
  check((await page.evaluate(() => document.cookie)) === "", "a cookie was set");
  check((await page.evaluate(() => Object.values(sessionStorage))).includes(token), "the token is not in sessionStorage");
  await page.waitForSelector("#f-soft_cap", { timeout: STEP });
  // The listing says how many queues it shows, and that it shows them all.
  await page.waitForFunction(() => /^Showing 1–\d+ of \d+ queues\.$/.test(document.getElementById("count").textContent), null, { timeout: STEP });
  check(await page.isHidden("#cut"), "the list says it is cut");
  check(await page.isDisabled("#delete"), "the default queue can be deleted");
  console.log("SIGNED_IN");

  // A swarm runs: the counts move.
  await expectLine("swarm");
  const seen = new Set();
  let inside = 0;
  for (let i = 0; i < 120 && (seen.size < 3 || inside === 0); i++) {
    const r = await row(page, "default");
    if (r) { seen.add(r.waiting); inside = Math.max(inside, r.inside + r.ticketsOut); }
    await page.waitForTimeout(250);
  }
  check(seen.size >= 3 && inside > 0, `the counts did not move: waiting ${[...seen]}, inside ${inside}`);
  console.log("COUNTS " + [...seen].join(","));

  // A soft cap raised in the form.
  const cap = await expectLine("cap");
  await page.fill("#f-soft_cap", cap);
  await page.click("#settings-form button[type=submit]");
  await page.waitForFunction(() => /Settings saved: soft_cap/.test(document.getElementById("status").textContent), null, { timeout: STEP });
  console.log("SOFT_CAP " + cap);

  // An invalid value: the API's message at its field, the field marked and focused.
  await page.fill("#f-soft_cap", "-5");
  await page.click("#settings-form button[type=submit]");
  await page.waitForFunction(() => document.getElementById("error-soft_cap").textContent.length > 0, null, { timeout: STEP });
  check((await page.getAttribute("#f-soft_cap", "aria-invalid")) === "true", "the field is not marked invalid");
  check((await page.evaluate(() => document.activeElement?.id)) === "f-soft_cap", "the field is not focused");
  check((await page.getAttribute("#f-soft_cap", "aria-describedby")).includes("error-soft_cap"), "the message is not tied to the field");
  console.log("INVALID " + (await text(page, "#error-soft_cap")));
  await page.fill("#f-soft_cap", cap);

  // Pause, then resume.
  await expectLine("pause");
  await page.click("#pause");
  await page.waitForFunction(() => /^Paused/.test(document.getElementById("pause-state").textContent), null, { timeout: STEP });
  await page.waitForFunction(() => document.querySelector('#queues tr[data-queue="default"] [data-field="admission"]')?.textContent === "Paused",
    null, { timeout: STEP });
  check(await page.isDisabled("#pause"), "pause stays enabled while paused");
  console.log("PAUSED");
  await expectLine("resume");
  await page.click("#resume");
  await page.waitForFunction((c) => document.getElementById("pause-state").textContent === "Admitting up to a soft cap of " + c + ".", cap, { timeout: STEP });
  console.log("RESUMED");

  // The chart of the last minutes.
  const points = await page.evaluate(() => document.querySelector("#chart polyline")?.getAttribute("points")?.split(" ").length ?? 0);
  check(points >= 5, "the chart has " + points + " points");
  console.log("CHART " + points);

  await page.screenshot({ path: `${shots}/admin-desktop.png`, fullPage: true });
  const violations = await axe(page, "back office");
  await page.setViewportSize({ width: 390, height: 844 });
  await page.screenshot({ path: `${shots}/admin-phone.png`, fullPage: true });
  await page.setViewportSize({ width: 1280, height: 900 });
  console.log("AXE " + violations);

  // An opening scheduled on another queue, and its commitment.
  const other = await expectLine("opening");
  await page.fill("#open-queue", other);
  await page.press("#open-queue", "Enter");
  await page.waitForFunction((q) => document.getElementById("detail-title").textContent === "Queue " + q, other, { timeout: STEP });
  await page.waitForFunction((q) => /created/.test(document.getElementById("status").textContent) &&
    document.querySelector(`#queues tr[data-queue="${q}"]`), other, { timeout: STEP });
  check(!(await page.isDisabled("#delete")), "an empty queue cannot be deleted");
  // The search finds it by part of its name, and the count says so.
  await page.fill("#search", other.slice(1, 4).toUpperCase());
  await page.waitForFunction((q) => document.getElementById("count").textContent.startsWith("Showing 1–1 of 1 queues matching") &&
    document.querySelectorAll("#queues tbody tr").length === 1 && document.querySelector(`#queues tr[data-queue="${q}"]`), other, { timeout: STEP });
  await page.fill("#search", "");
  await page.waitForFunction(() => document.querySelectorAll("#queues tbody tr").length === 2, null, { timeout: STEP });
  const inAnHour = await page.evaluate(() => {
    const d = new Date(Date.now() + 3600_000);
    const p = (n) => String(n).padStart(2, "0");
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
  });
  await page.fill("#opens-at", inAnHour);
  await page.click("#opening-form button[type=submit]");
  await page.waitForFunction(() => /^[0-9a-f]{64}$/.test(document.getElementById("commitment")?.textContent ?? ""), null, { timeout: STEP });
  await page.screenshot({ path: `${shots}/admin-opening-desktop.png`, fullPage: true });
  console.log("COMMITMENT " + (await text(page, "#commitment")));

  await noProblems(page, problems, "back office");
});
console.log("CLOSED");
