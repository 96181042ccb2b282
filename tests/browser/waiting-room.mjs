// A person in a real browser: opens the waiting-room page, enters a nickname, sees a
// position, is taken to the chat page when admitted, and says something there.
//   node waiting-room.mjs <queue-api URL> <chat-server URL> <nickname>
// Prints WAITING <rank>, ADMITTED, CHATTED as it goes; after CHATTED it waits for a
// line on stdin before closing the browser. Exits 1 on any failure (60 s at most).
import { chromium } from "playwright-core";
import { createInterface } from "node:readline";

const [api, chat, nickname] = process.argv.slice(2);
const STEP = 30_000;
const fail = (e) => { console.error("FAILED:", e?.message ?? e); process.exit(1); };
setTimeout(() => fail("took longer than 60 s"), 60_000).unref();

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
  await page.waitForFunction(() => /^\d+$/.test(document.getElementById("rank")?.textContent ?? ""), null, { timeout: STEP });
  console.log("WAITING " + (await page.textContent("#rank")));

  await page.waitForURL((u) => u.origin === new URL(chat).origin, { timeout: STEP });
  const url = new URL(page.url());
  if (!url.searchParams.get("ticketId")) throw new Error("no ticket in " + url);
  console.log("ADMITTED");

  await page.waitForFunction(() => document.getElementById("state")?.textContent === "connected", null, { timeout: STEP });
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
