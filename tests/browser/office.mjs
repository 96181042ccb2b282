// The back office at phone width (360 px) in headless Chromium, for a queue whose
// admitted people go on to the gate's claim: before a gate runs, the page offers no
// room link that would end at a claim nobody serves and says why; once the gate
// describes itself, the queue's gate route is shown and "Open the waiting room"
// opens the room through the gate, where it loads and enters by itself. Durations are shown and typed as
// durations (a duration saved as "90s", a bad one refused at its field); the page
// never scrolls sideways, with a gate's settings opened too; axe-core finds no
// violation at all; the Content-Security-Policy blocks nothing.
//   node office.mjs <queue-api URL> <admin token> <queue> <shots dir>
// Prints SIGNED_IN, NO_GATE <note>; after "gate <gate URL>" on stdin ROUTE <room link>;
// DURATION <shown ticket_ttl>; SAVED <shown after saving 90s>; BAD <message>;
// WIDTH <page width> <viewport width>; AXE <violations>; ROOM <title>; then CLOSED.
// Exits 1 on any failure (150 s at most).
import { mkdirSync } from "node:fs";
import { STEP, axe, check, deadline, expectLine, launch, noProblems, run, text, watch } from "./harness.mjs";

const [api, token, queue, shots] = process.argv.slice(2);
deadline(150);
mkdirSync(shots, { recursive: true });

const browser = await launch();
const problems = [];
const widths = (page) => page.evaluate(() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]);
// The elements that reach past the viewport's right edge (the outermost ones), to say
// what makes the page scroll sideways.
const wide = (page) => page.evaluate(() => {
  const w = document.documentElement.clientWidth;
  const out = [...document.querySelectorAll("body *")].filter((e) => e.getBoundingClientRect().right > w + 0.5);
  return out.filter((e) => !out.includes(e.parentElement)).slice(0, 5)
    .map((e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + "." + e.className + " " + Math.round(e.getBoundingClientRect().right)).join(", ");
});

await run(browser, async () => {
  const ctx = await browser.newContext({ viewport: { width: 360, height: 740 } });
  const page = await ctx.newPage();
  await watch(page, api, problems);
  await page.goto(api + "/admin", { timeout: STEP });
  await page.fill("#token", token);
  await page.press("#token", "Enter");
  await page.waitForSelector(`#queues tr[data-queue="${queue}"]`, { timeout: STEP });
  await page.click(`#queues tr[data-queue="${queue}"] button`);
  await page.waitForSelector("#f-ticket_ttl", { timeout: STEP });
  console.log("SIGNED_IN");

  // No gate yet: no link to a room whose admission would end at a claim nobody serves.
  await page.waitForFunction(() => /only the gate serves/.test(document.getElementById("preview-note").textContent), null, { timeout: STEP });
  check(await page.isHidden("#preview"), "the room link is offered without a gate");
  console.log("NO_GATE " + (await text(page, "#preview-note")));

  // The gate runs: its route to the queue, and the room through it.
  const gate = await expectLine("gate");
  await page.waitForFunction(() => /\/checkout/.test(document.getElementById("routes-list").textContent), null, { timeout: STEP });
  const href = await page.getAttribute("#preview", "href");
  check(href.startsWith(gate + "/gate/room/?queue=" + encodeURIComponent(queue) + "&return=%2Fcheckout"), "the room link is " + href);
  check(!(await page.isHidden("#preview")), "the room link is hidden with a gate");
  console.log("ROUTE " + href);

  // Durations as durations, not milliseconds.
  const shown = await page.inputValue("#f-ticket_ttl");
  check(/^\d+ (d|h|min|s|ms)( \d+ (h|min|s|ms))*$/.test(shown), "ticket_ttl is shown as " + shown);
  for (const id of ["#f-session_lease", "#f-abandon_after"]) {
    const v = await page.inputValue(id);
    check(/^\d+ (d|h|min|s|ms)/.test(v), id + " is shown as " + v);
  }
  console.log("DURATION " + shown);
  await page.fill("#f-ticket_ttl", "90s");
  await page.click("#settings-form button[type=submit]");
  await page.waitForFunction(() => /Settings saved: ticket_ttl/.test(document.getElementById("status").textContent), null, { timeout: STEP });
  await page.waitForFunction(() => document.getElementById("f-ticket_ttl").value === "1 min 30 s", null, { timeout: STEP });
  console.log("SAVED " + (await page.inputValue("#f-ticket_ttl")));
  await page.fill("#f-ticket_ttl", "5 parsecs");
  await page.click("#settings-form button[type=submit]");
  await page.waitForFunction(() => document.getElementById("error-ticket_ttl").textContent.length > 0, null, { timeout: STEP });
  check((await page.getAttribute("#f-ticket_ttl", "aria-invalid")) === "true", "the bad duration is not marked");
  console.log("BAD " + (await text(page, "#error-ticket_ttl")));
  await page.fill("#f-ticket_ttl", "1 min 30 s");

  // No sideways scrolling at 360 px, with a gate's settings open.
  await page.click("#gates-list summary");
  await page.waitForSelector("#gates-list dl", { state: "visible", timeout: STEP });
  const [scroll, view] = await widths(page);
  check(scroll <= view, `the page scrolls sideways at 360 px: ${scroll} > ${view} (${await wide(page)})`);
  await page.screenshot({ path: `${shots}/admin-360.png`, fullPage: true });
  console.log("WIDTH " + scroll + " " + view);
  const found = await axe(page, "back office at 360 px");
  const ids = await page.evaluate(async () => (await window.axe.run(document, { resultTypes: ["violations"] })).violations
    .map((v) => v.id + ":" + v.impact + " " + v.nodes.map((n) => n.target.join(" ")).join(" ")));
  check(found === 0, "axe-core finds " + ids.join("; "));
  console.log("AXE " + found);
  await noProblems(page, problems, "back office");

  // The link opens the room as the gate serves it.
  const room = await ctx.newPage();
  const answer = await room.goto(href, { timeout: STEP });
  check(answer.status() === 200, "the room through the gate answers " + answer.status());
  check(new URL(answer.url()).origin === new URL(gate).origin, "the room is not the gate's: " + answer.url());
  // The queue's people go on to an app, so the room asks no nickname and enters as it
  // loads: it shows a place in line or, with a slot free, goes on through the gate.
  const until = Date.now() + STEP;
  let where = "";
  for (;;) {
    where = new URL(room.url()).pathname;
    const placed = where.startsWith("/gate/room/") &&
      (await room.evaluate(() => document.body?.dataset.ready === "true" && !document.getElementById("enter")?.checkVisibility?.()).catch(() => false));
    if (placed || !where.startsWith("/gate/room/")) break;
    check(Date.now() < until, "the room through the gate neither placed its visitor nor went on");
    await new Promise((r) => setTimeout(r, 100));
  }
  await room.waitForLoadState("load", { timeout: STEP });
  check(new URL(room.url()).origin === new URL(gate).origin, "the room went off the gate: " + room.url());
  console.log("ROOM " + (await room.title()));
});
console.log("CLOSED");
