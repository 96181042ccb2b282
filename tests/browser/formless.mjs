// The formless waiting room in headless Chromium (a queue that asks no nickname, as
// the gate's queues do): the page enters by itself as it loads, with no form, in
// Korean (Accept-Language) and in English (?lang=en); a second tab and a reload of
// the same browser show the same place (no second entry); another browser given the
// first one's userId (copied into its storage) gets no hold of that place and enters
// as a person of its own; when the place's turn comes the page goes on to the admit
// URL at once. axe-core finds no serious or critical violation; the
// Content-Security-Policy blocks nothing; nothing is asked of another origin.
//   node formless.mjs <queue-api URL> <shots dir>
// Prints KO_WAITING <rank>, KO_TAB <rank>, KO_RELOADED <rank>, EN_WAITING <rank>,
// COPIED <rank> <same|other>, AXE <violations> <violations> (from then on it is
// ready for the turn); after "admit" on stdin
// ADMITTED <ms from the turn shown to the navigation> <url>; then CLOSED. Exits 1 on
// any failure (120 s at most).
import { readFileSync, mkdirSync } from "node:fs";
import { STEP, axe, check, deadline, expectLine, launch, noProblems, run, text, watch } from "./harness.mjs";

const [api, shots] = process.argv.slice(2);
deadline(120);
mkdirSync(shots, { recursive: true });

const messages = (tag) =>
  JSON.parse(readFileSync(new URL(`../../services/queue-api/static/i18n/${tag}.json`, import.meta.url), "utf8"));
const KO = messages("ko"), EN = messages("en");
const ROOM = "/?return=" + encodeURIComponent("/shop/item?id=7");
const KEPT = "waiting-room:default";

const browser = await launch();
const problems = [];

// A browser of its own (a context: its own storage and cookies) in `locale`.
async function person(locale) {
  return browser.newContext({
    locale, viewport: { width: 1280, height: 800 },
    extraHTTPHeaders: { "Accept-Language": locale + "," + locale.split("-")[0] + ";q=0.9" },
  });
}

// A tab of `ctx` on the room; the moment the turn is shown (and what it says) is
// kept in sessionStorage, which outlives the page's navigation on to the admit URL.
async function tab(ctx, path) {
  const page = await ctx.newPage();
  await watch(page, api, problems);
  await page.addInitScript(() => {
    document.addEventListener("DOMContentLoaded", () => {
      const turn = document.getElementById("turn");
      if (!turn) return;
      new MutationObserver(() => {
        if (turn.hidden || sessionStorage.getItem("turnAt")) return;
        sessionStorage.setItem("turnAt", String(performance.timeOrigin + performance.now()));
        sessionStorage.setItem("turnRank", document.getElementById("rank").textContent);
        sessionStorage.setItem("turnState", document.getElementById("state").textContent);
      }).observe(turn, { attributes: true });
    });
  });
  await page.goto(api + path, { timeout: STEP });
  return page;
}

// The page in line by itself: a place shown, no form, no nickname box.
async function waiting(page, what) {
  await page.waitForFunction(() => /^\d[\d,.]*$/.test(document.getElementById("rank")?.textContent ?? ""), null,
    { timeout: STEP });
  check(await page.isHidden("#enter"), `${what}: a form is shown`);
  check(await page.isHidden("#nickname"), `${what}: a nickname box is shown`);
  return text(page, "#rank");
}
const keptId = (page) => page.evaluate((k) => localStorage.getItem(k), KEPT);

await run(browser, async () => {
  // Korean: in line as the page loads.
  const koCtx = await person("ko-KR");
  const ko = await tab(koCtx, ROOM);
  check((await ko.getAttribute("html", "lang")) === "ko", "the page is not in Korean");
  check((await ko.getAttribute("body", "data-nickname")) === "none", "the queue asks a nickname");
  check((await text(ko, "#intro")) === KO.intro_quiet, "a short line is not called a crowd: " + (await text(ko, "#intro")));
  const koRank = await waiting(ko, "Korean page");
  const koId = await keptId(ko);
  check(koId, "no place kept");
  console.log("KO_WAITING " + koRank);

  // A second tab of the same browser: the same person, the same place.
  const koTab = await tab(koCtx, ROOM);
  const tabRank = await waiting(koTab, "second tab");
  check((await keptId(koTab)) === koId, "the second tab is someone else");
  console.log("KO_TAB " + tabRank);
  await koTab.reload({ timeout: STEP });
  await koTab.waitForFunction(() => document.body.dataset.ready === "true", null, { timeout: STEP });
  const reloaded = await waiting(koTab, "reloaded tab");
  check((await keptId(koTab)) === koId, "the reload is someone else");
  console.log("KO_RELOADED " + reloaded);
  await koTab.close();

  // English, by ?lang=, in a browser of its own: behind.
  const enCtx = await person("ko-KR");
  const en = await tab(enCtx, "/?lang=en&return=" + encodeURIComponent("/shop/item?id=7"));
  check((await en.getAttribute("html", "lang")) === "en", "?lang=en did not win");
  check((await text(en, "#intro")) === EN.intro_quiet, "English intro: " + (await text(en, "#intro")));
  console.log("EN_WAITING " + (await waiting(en, "English page")));

  // Another browser given the Korean person's id: no hold of that place.
  const copyCtx = await person("en-US");
  const seed = await copyCtx.newPage();
  await seed.goto(api + "/healthz", { timeout: STEP });
  await seed.evaluate(([k, id]) => localStorage.setItem(k, id), [KEPT, koId]);
  await seed.close();
  const copy = await tab(copyCtx, "/?lang=en");
  const copyRank = await waiting(copy, "copied id");
  const copyId = await keptId(copy);
  console.log(`COPIED ${copyRank} ${copyId === koId ? "same" : "other"}`);
  await copyCtx.close();

  const violations = `${await axe(ko, "Korean formless page")} ${await axe(en, "English formless page")}`;
  await ko.screenshot({ path: `${shots}/formless-ko-desktop.png`, fullPage: true });
  await en.screenshot({ path: `${shots}/formless-en-desktop.png`, fullPage: true });
  await noProblems(ko, problems, "Korean page");
  await noProblems(en, problems, "English page");

  // The turn (any moment after AXE is told): on to the admit URL at once, the turn
  // said first.
  const navigation = ko.waitForRequest((r) => r.isNavigationRequest() && new URL(r.url()).pathname === "/landing",
    { timeout: STEP * 2 });
  console.log("AXE " + violations);
  await expectLine("admit");
  const request = await navigation;
  const navigatedAt = Date.now();
  await ko.waitForURL((u) => u.pathname === "/landing", { timeout: STEP });
  const turn = await ko.evaluate(() => ({
    at: Number(sessionStorage.getItem("turnAt")), rank: sessionStorage.getItem("turnRank"),
    state: sessionStorage.getItem("turnState"),
  }));
  check(turn.at > 0, "the turn was never shown before leaving");
  check(turn.rank === KO.your_turn, "your turn, in Korean: " + turn.rank);
  check(turn.state.startsWith(KO.sending.split("{")[0]), "where to, in Korean: " + turn.state);
  console.log(`ADMITTED ${Math.max(0, Math.round(navigatedAt - turn.at))} ${request.url()}`);
  await expectLine("close");
});
console.log("CLOSED");
