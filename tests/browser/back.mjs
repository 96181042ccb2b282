// One person per admitted visitor, in a real browser behind the gate: a person asks
// the app for a gated page, is sent to the waiting room, joins as the page loads
// (no form: the gate's queue asks no nickname), is admitted (the gate
// claims the ticket and sends them back to the app), then presses Back: they land in
// the app again as the same person, not in the room with an empty form. A bookmark of
// the room opened in a second tab does the same, and an entry the browser sends to
// the room's API anyway gets its own place back.
//   node back.mjs <gate URL>
// Prints ADMITTED <user>, BACK <user> (or BACK_ROOM <what the room shows> when Back
// lands in the room), TAB <user>, ENTRY <status> <userId>; then waits for a line on
// stdin and prints CLOSED. Exits 1 on any failure (90 s at most).
import { STEP, check, deadline, launch, nextLine, run } from "./harness.mjs";

const [gate] = process.argv.slice(2);
deadline(90);

// The user the app says it serves (the example app answers JSON naming X-Queue-User).
const appUser = async (page) => {
  const text = await page.evaluate(() => document.body.innerText);
  const m = /"user":\s*"([^"]+)"/.exec(text);
  check(m, "not the app's answer: " + text.slice(0, 200));
  return m[1];
};
const atApp = (page, timeout = STEP) =>
  page.waitForURL((u) => u.pathname === "/checkout" && u.searchParams.get("item") === "7", { timeout });

const browser = await launch();
await run(browser, async () => {
  const ctx = await browser.newContext();
  const page = await ctx.newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));
  await page.goto(gate + "/checkout?item=7", { timeout: STEP });
  // The gate's queue asks no nickname: the room enters as it loads (no form). There
  // is room: promoted at once, on to /gate/claim, back to the app.
  await atApp(page);
  const user = await appUser(page);
  console.log("ADMITTED " + user);

  await page.goBack({ timeout: STEP });
  try {
    await atApp(page, 10_000);
    console.log("BACK " + (await appUser(page)));
  } catch (_) {
    const form = await page.isVisible("#enter").catch(() => false);
    console.log(`BACK_ROOM ${page.url()} form=${form}`);
  }

  // A bookmark of the room in a second tab of the same browser.
  const tab = await ctx.newPage();
  await tab.goto(gate + "/gate/room/?queue=default&return=" + encodeURIComponent("/checkout?item=7"), { timeout: STEP });
  try {
    await atApp(tab, 10_000);
    console.log("TAB " + (await appUser(tab)));
  } catch (_) {
    console.log("TAB_ROOM " + tab.url());
  }

  // An entry sent to the room's API from this browser anyway: its own place back.
  const entry = await tab.evaluate(() =>
    fetch("/gate/room/api/queue/entry", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ nickname: "again", queue: "default" }),
    }).then((r) => r.json()));
  console.log(`ENTRY ${entry.status} ${entry.userId}`);

  await nextLine();
});
console.log("CLOSED");
