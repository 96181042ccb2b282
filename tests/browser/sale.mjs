// A sale's end as people see it, in headless Chromium, in English and in Japanese:
// two people wait; the operator's message shows on both pages without a reload;
// sold out says so and offers to leave (the English person leaves, and sees sold out
// with no form); closed says the sale has ended, to the Japanese person still in line
// and to a newcomer, who gets no form; the message cleared is gone. axe-core finds no
// serious or critical violation in any state; the Content-Security-Policy blocks
// nothing; nothing is asked of another origin. The script drives the back office's
// API itself (the admin token).
//   node sale.mjs <queue-api URL> <admin token> <queue> <shots dir>
// Prints WAITING <en rank> <ja rank>, MESSAGE <ms until both pages showed it>,
// SOLD_OUT <ms>, LEFT, CLOSED <ms>, NEWCOMER, CLEARED <ms>, AXE <violations...>, then
// DONE. Exits 1 on any failure (150 s at most).
import { readFileSync, mkdirSync } from "node:fs";
import { STEP, axe, check, deadline, launch, noProblems, run, text, watch } from "./harness.mjs";

const [api, token, queue, shots] = process.argv.slice(2);
deadline(150);
mkdirSync(shots, { recursive: true });

const messages = (tag) =>
  JSON.parse(readFileSync(new URL(`../../services/queue-api/static/i18n/${tag}.json`, import.meta.url), "utf8"));
const EN = messages("en"), JA = messages("ja");
const q = encodeURIComponent(queue);

async function admin(method, path, body) {
  const r = await fetch(`${api}/api/admin/queues/${q}${path}`, {
    method, headers: { authorization: "Bearer " + token, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const answer = await r.text();
  check(r.ok, `${method} ${path}: ${r.status} ${answer}`);
  return JSON.parse(answer);
}

const browser = await launch();
const problems = [];
const violations = [];

async function person(locale, lang) {
  const ctx = await browser.newContext({
    locale, viewport: { width: 1280, height: 800 },
    extraHTTPHeaders: { "Accept-Language": locale },
  });
  const page = await ctx.newPage();
  await watch(page, api, problems);
  await page.goto(`${api}/?queue=${q}&lang=${lang}`, { timeout: STEP });
  await page.waitForFunction(() => document.body.dataset.ready === "true", null, { timeout: STEP });
  return page;
}

async function enter(page, nickname) {
  await page.fill("#nickname", nickname);
  await page.click("#enter button[type=submit]");
  await page.waitForFunction(() => /^\d[\d,.]*$/.test(document.getElementById("rank")?.textContent ?? ""), null,
    { timeout: STEP });
  return text(page, "#rank");
}

// Waits until `check` holds on every page; the milliseconds it took.
async function onAll(pages, fn, arg) {
  const started = Date.now();
  await Promise.all(pages.map(([page, m]) => page.waitForFunction(fn, [arg, m], { timeout: STEP })));
  return Date.now() - started;
}

async function audit(pages, state) {
  for (const [page, , tag] of pages) {
    violations.push(await axe(page, `${tag} page, ${state}`));
    await page.screenshot({ path: `${shots}/sale-${state}-${tag}.png`, fullPage: true });
  }
}

await run(browser, async () => {
  await admin("PUT", "", { soft_cap: 0, inventory: null, closes_at: null });
  await admin("PUT", "/message", { text: "" });
  const en = await person("en-US", "en");
  const ja = await person("ja-JP", "ja");
  check((await ja.getAttribute("html", "lang")) === "ja", "the page is not in Japanese");
  console.log(`WAITING ${await enter(en, "ann")} ${await enter(ja, "はな")}`);
  const both = [[en, EN, "en"], [ja, JA, "ja"]];

  // The message: shown without a reload, under the heading of each language.
  const said = "Doors open at 8 — 20時開場";
  await admin("PUT", "/message", { text: said });
  let ms = await onAll(both, ([t, m]) => !document.getElementById("notice").hidden &&
    document.getElementById("notice-text").textContent === t &&
    document.getElementById("notice-label").textContent.trim() === m.notice_label, said);
  await audit(both, "message");
  console.log("MESSAGE " + ms);

  // Sold out: said, in each language, with the leave button offered.
  await admin("PUT", "", { inventory: 0 });
  ms = await onAll(both, ([, m]) => {
    const box = document.getElementById("sale");
    return !box.hidden && box.textContent === m.sold_out_waiting && !document.getElementById("leave").hidden;
  });
  await audit(both, "sold-out");
  console.log("SOLD_OUT " + ms);
  await en.click("#leave");
  await en.waitForFunction((m) => document.getElementById("sale").textContent === m.sold_out &&
    document.getElementById("enter").hidden, EN, { timeout: STEP });
  console.log("LEFT");

  // Closed (stock back, the closing time past): the sale has ended.
  await admin("PUT", "", { inventory: null, closes_at: Date.now() - 1000 });
  // (The English page left the line: it follows no stream any more.)
  ms = await onAll([[ja, JA]], ([, m]) => document.getElementById("sale").textContent === m.sale_closed);
  check(await ja.isVisible("#leave"), "the Japanese person still in line can leave");
  await audit([[ja, JA, "ja"]], "closed");
  console.log("CLOSED " + ms);

  // A newcomer to a closed queue: told, no form.
  const late = await person("ja-JP", "ja");
  check((await late.getAttribute("body", "data-sale")) === "closed", "the page does not come closed");
  check((await text(late, "#sale")) === JA.sale_closed, "the newcomer is told: " + (await text(late, "#sale")));
  check(await late.isHidden("#enter"), "a newcomer to a closed sale gets a form");
  check((await text(late, "#notice-text")) === said, "the message as the page loads");
  violations.push(await axe(late, "newcomer to a closed sale"));
  await late.screenshot({ path: `${shots}/sale-closed-newcomer-ja.png`, fullPage: true });
  console.log("NEWCOMER");

  // The message cleared: gone without a reload.
  await admin("PUT", "/message", { text: "" });
  ms = await onAll([[ja, JA]], () => document.getElementById("notice").hidden);
  console.log("CLEARED " + ms);

  for (const [page, , tag] of both) await noProblems(page, problems, tag + " page");
  await noProblems(late, problems, "newcomer");
  console.log("AXE " + violations.join(" "));
  await admin("PUT", "", { closes_at: null });
});
console.log("DONE");
