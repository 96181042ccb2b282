// The waiting-room page in its languages, brand and replaced template, in headless
// Chromium: a Korean person (Accept-Language) joins with the keyboard alone and an
// English one (?lang=en) joins behind; the texts are the messages files', numbers and
// durations formatted for each language; the total is in the first push event; the
// progress bar moves as the people ahead are admitted; "you are next", then the
// admit URL with ticketId,
// queue and return; the paused state; a branded queue; a replaced template. axe-core
// finds no serious or critical violation on any of them; the Content-Security-Policy
// blocks nothing and nothing is loaded from elsewhere; at 320 px nothing scrolls
// sideways. Screenshots at desktop and phone widths go to <shots>.
//   node pages.mjs <queue-api URL> <queue-api URL with --templates> <shots dir>
// Prints KO_WAITING <rank>, EN_WAITING <rank>; after "crowd <total>" on stdin TOTALS;
// AXE_WAITING; after each "admit": PROGRESS <percent>, NEXT, ADMITTED <url>; after
// "paused": PAUSED; after "brand": BRANDED, TEMPLATE; then CLOSED. Exits 1 on any
// failure (170 s at most).
import { readFileSync, mkdirSync } from "node:fs";
import { STEP, axe, check, deadline, expectLine, launch, noProblems, run, text, watch } from "./harness.mjs";

const [api, templated, shots] = process.argv.slice(2);
deadline(170);
mkdirSync(shots, { recursive: true });

const messages = (tag) =>
  JSON.parse(readFileSync(new URL(`../../services/queue-api/static/i18n/${tag}.json`, import.meta.url), "utf8"));
const KO = messages("ko"), EN = messages("en");
const fill = (text, vars) => text.replace(/\{(\w+)\}/g, (_, k) => String(vars[k]));

const browser = await launch();

// Every page: its errors, anything the policy blocked, anything asked of another
// origin, and the first push event it got (to see the total in it).
const problems = [];
async function open(base, path, { locale = "en-US", width = 1280, height = 800 } = {}) {
  const ctx = await browser.newContext({
    locale, viewport: { width, height }, extraHTTPHeaders: { "Accept-Language": locale + "," + locale.split("-")[0] + ";q=0.9" },
  });
  const page = await ctx.newPage();
  await watch(page, base, problems);
  await page.addInitScript(() => {
    const Native = window.EventSource;
    window.firstPosition = null;
    window.EventSource = class extends Native {
      constructor(...a) {
        super(...a);
        this.addEventListener("position", (e) => { if (!window.firstPosition) window.firstPosition = JSON.parse(e.data); });
      }
    };
  });
  await page.goto(base + path, { timeout: STEP });
  return page;
}

// The page at 320 px: nothing wider than the screen, the form and the place visible.
async function narrow(page, name) {
  await page.setViewportSize({ width: 320, height: 640 });
  const wide = await page.evaluate(() => document.documentElement.scrollWidth);
  check(wide <= 320, `${name}: ${wide} px wide at 320`);
  await page.screenshot({ path: `${shots}/${name}-phone-320.png`, fullPage: true });
  await page.setViewportSize({ width: 390, height: 844 });
  await page.screenshot({ path: `${shots}/${name}-phone.png`, fullPage: true });
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.screenshot({ path: `${shots}/${name}-desktop.png`, fullPage: true });
}

const ranked = (page) =>
  page.waitForFunction(() => /^\d[\d,.]*$/.test(document.getElementById("rank")?.textContent ?? ""), null, { timeout: STEP });

await run(browser, async () => {
  // Korean, from Accept-Language; joined with the keyboard alone.
  const ko = await open(api, "/?return=" + encodeURIComponent("/shop/item?id=7"), { locale: "ko-KR" });
  check((await ko.getAttribute("html", "lang")) === "ko", "the page is not in Korean");
  check((await text(ko, "h1")) === KO.title, "Korean title");
  check((await text(ko, "#enter button")) === KO.join, "Korean join button");
  check((await text(ko, "label[for=nickname]")) === KO.nickname_label, "Korean label");
  for (let i = 0; i < 10 && (await ko.evaluate(() => document.activeElement?.id)) !== "nickname"; i++) {
    await ko.keyboard.press("Tab");
  }
  check((await ko.evaluate(() => document.activeElement?.id)) === "nickname", "Tab never reaches the nickname field");
  await ko.keyboard.type("민수");
  await ko.keyboard.press("Tab");
  check((await ko.evaluate(() => document.activeElement?.textContent?.trim())) === KO.join, "Tab goes to the join button");
  await ko.keyboard.press("Enter");
  await ranked(ko);
  await ko.waitForFunction(() => window.firstPosition, null, { timeout: STEP });
  const first = await ko.evaluate(() => window.firstPosition);
  check(typeof first.totalWaiting === "number", "no total in the first push event: " + JSON.stringify(first));
  await ko.waitForFunction((t) => document.getElementById("total").textContent === t,
    fill(KO.total, { total: first.totalWaiting }), { timeout: STEP });
  check((await ko.getAttribute("#live", "aria-live")) === "polite", "the updates are not in a live region");
  console.log("KO_WAITING " + (await text(ko, "#rank")));

  // English, by ?lang= over a Korean Accept-Language.
  const en = await open(api, "/?lang=en", { locale: "ko-KR" });
  check((await en.getAttribute("html", "lang")) === "en", "?lang=en did not win");
  check((await text(en, "h1")) === EN.title, "English title");
  await en.fill("#nickname", "Jamie");
  await en.press("#nickname", "Enter");
  await ranked(en);
  console.log("EN_WAITING " + (await text(en, "#rank")));

  // A crowd behind: the total, formatted for each language, though no rank moved.
  const total = Number(await expectLine("crowd"));
  const koTotal = fill(KO.total, { total: new Intl.NumberFormat("ko").format(total) });
  const enTotal = fill(EN.total, { total: new Intl.NumberFormat("en").format(total) });
  check(koTotal.includes(",") && enTotal.includes(","), "a total in the thousands");
  await ko.waitForFunction((t) => document.getElementById("total").textContent === t, koTotal, { timeout: STEP });
  await en.waitForFunction((t) => document.getElementById("total").textContent === t, enTotal, { timeout: STEP });
  console.log(`TOTALS ${koTotal} | ${enTotal}`);
  await narrow(ko, "waiting-room-ko");
  await narrow(en, "waiting-room-en");
  console.log(`AXE_WAITING ${await axe(ko, "Korean page")} ${await axe(en, "English page")}`);

  // The people ahead are admitted one by one: the bar moves, then "you are next".
  await expectLine("admit");
  await ko.waitForFunction(() => Number(document.getElementById("progress").value) > 0, null, { timeout: STEP });
  const percent = await ko.evaluate(() => document.getElementById("progress").value);
  const progressText = await text(ko, "#progress-text");
  check(progressText === fill(KO.progress_text, { percent: new Intl.NumberFormat("ko", { style: "percent" }).format(percent / 100) }),
    "progress text: " + progressText);
  console.log("PROGRESS " + percent);
  await expectLine("admit");
  await ko.waitForSelector("#next:not([hidden])", { timeout: STEP });
  check((await text(ko, "#next")) === KO.next, "you are next, in Korean");
  check(Number(await ko.evaluate(() => document.getElementById("progress").value)) > percent, "the bar moved on");
  await noProblems(ko, problems, "Korean page");
  await ko.screenshot({ path: `${shots}/waiting-room-ko-next-desktop.png`, fullPage: true });
  // The person's turn may come any moment after NEXT: on to the admit URL at once
  // (formless.mjs sees the turn said first and measures how soon the page leaves).
  const navigation = ko.waitForRequest((r) => r.isNavigationRequest() && new URL(r.url()).pathname === "/landing",
    { timeout: STEP * 2 });
  console.log("NEXT");

  await expectLine("admit");
  console.log("ADMITTED " + (await navigation).url());

  // Admission paused by the operator: said so, in English.
  await expectLine("paused");
  await en.waitForFunction((t) => document.getElementById("eta").textContent === t, EN.paused, { timeout: STEP });
  await narrow(en, "waiting-room-en-paused");
  await axe(en, "English page, paused");
  await noProblems(en, problems, "English page");
  console.log("PAUSED");

  // A branded queue (set in the back office): its title, message and colours.
  const brand = JSON.parse(await expectLine("brand"));
  const branded = await open(api, "/?queue=" + brand.queue, { locale: "ko-KR" });
  check((await text(branded, "h1")) === brand.title, "branded title");
  check((await text(branded, "#intro")) === brand.message, "branded message");
  check((await branded.title()) === brand.title, "branded window title");
  const colours = await branded.evaluate(() => ({
    background: getComputedStyle(document.body).backgroundColor,
    button: getComputedStyle(document.querySelector("#enter button")).backgroundColor,
  }));
  check(colours.background === brand.backgroundRgb && colours.button === brand.accentRgb, "brand colours: " + JSON.stringify(colours));
  await narrow(branded, "waiting-room-branded");
  await axe(branded, "branded page");
  await noProblems(branded, problems, "branded page");
  console.log("BRANDED");

  // The replaced template: its own layout and stylesheet, the brand title escaped,
  // and still a working waiting room.
  const tpl = await open(templated, "/?queue=" + brand.templateQueue, { locale: "ko-KR" });
  check((await tpl.locator(".shop-name").count()) === 1, "not the replaced template");
  check((await text(tpl, "h1")) === brand.templateTitle, "the template's title: " + (await text(tpl, "h1")));
  check((await text(tpl, "footer")) === `Queue ${brand.templateQueue} · ko`, "the template's variables");
  check((await tpl.evaluate(() => getComputedStyle(document.querySelector("h1")).color)) === "rgb(15, 118, 110)",
    "the template's stylesheet");
  await tpl.fill("#nickname", "템플릿");
  await tpl.press("#nickname", "Enter");
  await ranked(tpl);
  await narrow(tpl, "waiting-room-template");
  await axe(tpl, "replaced template");
  await noProblems(tpl, problems, "replaced template");
  console.log("TEMPLATE " + (await text(tpl, "#rank")));
});
console.log("CLOSED");
