// A person in a real browser: opens the waiting-room page, enters a nickname (solving
// the queue's proof of work in a Web Worker when it asks one), sees a position,
// reloads the page and keeps it, opens it in a second tab and finds the same place
// there (no second entry), is taken to the chat page when admitted, and says
// something there. Meanwhile a friend in another browser joins behind and clicks
// "Leave the line". Between the two, the person's tab goes to the background until
// told to come back: the document says it is hidden and every timer the page sets
// waits at least a minute, as Chrome throttles a background tab's timers (headless
// Chromium keeps every page visible, so the page is told so by a script the test
// adds; its push stream is the real one).
//   node waiting-room.mjs <queue-api URL> <chat-server URL> <nickname>
// Prints WAITING <rank>, PROOF <ms> (when one was asked), RELOADED <rank>,
// SECOND_TAB <rank> (the page opened in a second tab), FRIEND <rank>, LEFT, then waits for "hide" on stdin, prints HIDDEN, waits for "show",
// prints SHOWN <rank>, then ADMITTED, CHATTED; after CHATTED it waits for a line on stdin
// before closing the browser. Exits 1 on any failure (150 s at most).
import { STEP, deadline, expectLine, launch, nextLine, run } from "./harness.mjs";

const [api, chat, nickname] = process.argv.slice(2);
deadline(150);

const browser = await launch();
await run(browser, async () => {
  const page = await (await browser.newContext()).newPage();
  await page.addInitScript(() => {
    let hidden = false;
    const [timeout, interval] = [window.setTimeout, window.setInterval];
    const held = (ms) => (hidden ? Math.max(ms || 0, 60_000) : ms);
    window.setTimeout = (f, ms, ...a) => timeout(f, held(ms), ...a);
    window.setInterval = (f, ms, ...a) => interval(f, held(ms), ...a);
    Object.defineProperty(document, "visibilityState", { get: () => (hidden ? "hidden" : "visible") });
    Object.defineProperty(document, "hidden", { get: () => hidden });
    window.toBackground = (on) => { hidden = on; document.dispatchEvent(new Event("visibilitychange")); };
  });
  page.on("pageerror", (e) => console.error("page error:", e.message));
  await page.goto(api + "/", { timeout: STEP });
  await page.fill("#nickname", nickname);
  await page.press("#nickname", "Enter");
  const ranked = (p) =>
    p.waitForFunction(() => /^\d+$/.test(document.getElementById("rank")?.textContent ?? ""), null, { timeout: STEP });
  await ranked(page);
  console.log("WAITING " + (await page.textContent("#rank")));
  const proofMs = await page.evaluate(() => window.lastProofMs);
  if (proofMs !== null) console.log("PROOF " + proofMs);
  await page.reload({ timeout: STEP });
  await ranked(page);
  console.log("RELOADED " + (await page.textContent("#rank")));
  // A second tab of the same browser: the same person at the same place, no form to
  // enter a second time.
  const second = await page.context().newPage();
  await second.goto(api + "/", { timeout: STEP });
  await ranked(second);
  if (await second.isVisible("#enter")) throw new Error("the second tab offers the form");
  console.log("SECOND_TAB " + (await second.textContent("#rank")));
  await second.close();

  const friend = await (await browser.newContext()).newPage();
  friend.on("pageerror", (e) => console.error("friend page error:", e.message));
  await friend.goto(api + "/", { timeout: STEP });
  await friend.fill("#nickname", nickname + "-friend");
  await friend.press("#nickname", "Enter");
  await ranked(friend);
  console.log("FRIEND " + (await friend.textContent("#rank")));
  await friend.click("#leave", { timeout: STEP });
  await friend.waitForSelector("#state >> text=You left the line.", { timeout: STEP });
  if (!(await friend.isVisible("#enter"))) throw new Error("the form to join again is not shown");
  console.log("LEFT");

  // The tab in the background, then back in front.
  await expectLine("hide");
  await page.evaluate(() => window.toBackground(true));
  console.log("HIDDEN");
  await expectLine("show");
  if ((await page.evaluate(() => document.visibilityState)) !== "hidden") throw new Error("the tab was not hidden");
  await page.evaluate(() => window.toBackground(false));
  await ranked(page);
  console.log("SHOWN " + (await page.textContent("#rank")));

  // Admission is a navigation to the chat page with the ticket; the URL is taken from
  // the request, since the chat page removes the ticket from the address bar.
  const admitted = page.waitForRequest(
    (r) => r.isNavigationRequest() && new URL(r.url()).origin === new URL(chat).origin,
    { timeout: STEP },
  );

  const url = new URL((await admitted).url());
  if (!url.searchParams.get("ticketId")) throw new Error("no ticket in " + url);
  console.log("ADMITTED");

  await page.waitForFunction(() => document.getElementById("state")?.textContent === "connected", null, { timeout: STEP });
  if (new URL(page.url()).searchParams.has("ticketId")) throw new Error("the used ticket stays in the address bar");
  await page.waitForSelector("#people >> text=" + nickname, { timeout: STEP });
  await page.fill("#text", "hello from a real browser");
  await page.press("#text", "Enter");
  await page.waitForSelector("#log >> text=hello from a real browser", { timeout: STEP });
  console.log("CHATTED");

  await nextLine();
});
console.log("CLOSED");
