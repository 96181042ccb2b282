// A person in a real browser: opens the waiting-room page, enters a nickname, sees a
// position, reloads the page and keeps it, is taken to the chat page when admitted,
// and says something there. Meanwhile a friend in another browser joins behind and
// clicks "Leave the line".
//   node waiting-room.mjs <queue-api URL> <chat-server URL> <nickname>
// Prints WAITING <rank>, RELOADED <rank>, FRIEND <rank>, LEFT, ADMITTED, CHATTED as it
// goes; after CHATTED it waits for a line on stdin before closing the browser. Exits 1
// on any failure (90 s at most).
import { chromium } from "playwright-core";
import { createInterface } from "node:readline";

const [api, chat, nickname] = process.argv.slice(2);
const STEP = 30_000;
const fail = (e) => { console.error("FAILED:", e?.message ?? e); process.exit(1); };
setTimeout(() => fail("took longer than 90 s"), 90_000).unref();

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
}).catch(fail);
try {
  const page = await (await browser.newContext()).newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));
  await page.goto(api + "/", { timeout: STEP });
  await page.fill("#nickname", nickname);
  await page.press("#nickname", "Enter");
  const ranked = (p) =>
    p.waitForFunction(() => /^\d+$/.test(document.getElementById("rank")?.textContent ?? ""), null, { timeout: STEP });
  await ranked(page);
  console.log("WAITING " + (await page.textContent("#rank")));
  await page.reload({ timeout: STEP });
  await ranked(page);
  console.log("RELOADED " + (await page.textContent("#rank")));

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
  // Admission is a navigation to the chat page with the ticket; the URL is taken from
  // the request, since the chat page removes the ticket from the address bar.
  const admitted = page.waitForRequest(
    (r) => r.isNavigationRequest() && new URL(r.url()).origin === new URL(chat).origin,
    { timeout: STEP },
  );
  console.log("LEFT");

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

  await new Promise((done) => createInterface({ input: process.stdin }).once("line", done));
  await browser.close();
  console.log("CLOSED");
} catch (e) {
  await browser.close().catch(() => {});
  fail(e);
}
