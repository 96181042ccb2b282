// A person in a real browser enters a queue that has not opened yet: the page shows
// "The line opens in ..." and the commitment published for the draw, with a link to
// the proof; once the queue opens, the page shows the place the draw gave.
//   node opening.mjs <queue-api URL> <nickname>
// Prints OPENS_IN, COMMITMENT <hex> <proof link>, then RANKED <rank> after the
// opening. Exits 1 on any failure (60 s at most).
import { STEP, deadline, launch, run } from "./harness.mjs";

const [api, nickname] = process.argv.slice(2);
deadline(60);

const browser = await launch();
await run(browser, async () => {
  const page = await (await browser.newContext()).newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));
  await page.goto(api + "/", { timeout: STEP });
  await page.fill("#nickname", nickname);
  await page.press("#nickname", "Enter");
  await page.waitForFunction(() => /opens in \d+ seconds/.test(document.getElementById("opening")?.textContent ?? ""),
    null, { timeout: STEP });
  console.log("OPENS_IN");
  await page.waitForSelector("#opening code", { timeout: STEP });
  const commitment = await page.textContent("#opening code");
  const link = await page.getAttribute("#opening a", "href");
  console.log(`COMMITMENT ${commitment} ${link}`);
  await page.waitForFunction(() => /^\d+$/.test(document.getElementById("rank")?.textContent ?? ""), null,
    { timeout: STEP });
  console.log("RANKED " + (await page.textContent("#rank")));
});
process.exit(0);
