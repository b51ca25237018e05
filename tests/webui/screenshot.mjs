// Makes docs/webui.png, the README's picture of the chat page with the default model. The nano
// model is a single-turn toy (asked a second question, it repeats its first answer), so the
// picture is three fresh chats stacked: a fact from its table, an answer with thinking on (the
// reasoning opened), and a tool call answered from a pasted result. Each pane is a real
// screenshot of the page; they are put together in a blank page (no image library needed).
// Run after building: node tests/webui/screenshot.mjs [out.png]
import path from "node:path";

import { ROOT, ask, findBrowser, lastAnswer, launchBrowser, openPage, setSetting, startServer } from "./harness.mjs";

const out = process.argv[2] || path.join(ROOT, "docs/webui.png");
const WIDTH = 820;
const found = findBrowser();
if (found.missing) throw new Error(found.missing);
const [server, browser] = await Promise.all([startServer(), launchBrowser(found)]);

// One fresh chat in a window `height` high: `setup` adjusts settings, then `turn` runs it;
// returns a PNG of the page with the window grown to the whole chat.
async function pane(height, setup, turn) {
  const { page, close } = await openPage(browser, server.url + "/", { viewport: { width: WIDTH, height } });
  try {
    await page.emulateMediaFeatures([{ name: "prefers-color-scheme", value: "light" }]);
    await setSetting(page, "temperature", 0);
    await setup(page);
    await page.click("#settings-toggle");  // close the panel
    await turn(page);
    await page.evaluate(() => document.activeElement.blur());
    await page.mouse.move(WIDTH / 2, 1);  // no hover highlight
    // Grow the window to show the whole chat.
    const full = await page.evaluate(() => {
      const m = document.getElementById("messages");
      return Math.ceil(document.body.scrollHeight - m.clientHeight + m.scrollHeight);
    });
    await page.setViewport({ width: WIDTH, height: full });
    return await page.screenshot({ encoding: "base64" });
  } finally {
    await close();
  }
}

try {
  const shots = [];
  shots.push(await pane(240, async () => {}, async (page) => {
    await ask(page, "Where does Venlo live?");
    await lastAnswer(page);
  }));
  shots.push(await pane(240, (page) => setSetting(page, "enable-thinking", true), async (page) => {
    await ask(page, "What is 27 + 15?");
    await lastAnswer(page);
    await page.click(".msg.assistant .reasoning summary");
  }));
  shots.push(await pane(240, async (page) => {
    await setSetting(page, "enable-thinking", true);
    await page.click("#tools-example");
  }, async (page) => {
    await ask(page, "What is the weather in Fenwick?");
    await lastAnswer(page);
    await page.type(".tool-result", '{"city": "Fenwick", "temperature": 21, "condition": "sunny"}');
    await page.click(".tool-results button");
    await page.waitForFunction(() => document.querySelectorAll(".msg.assistant").length === 2);
    await lastAnswer(page);
    await page.click(".msg.assistant .reasoning summary");
  }));
  // Stack the panes in a blank page and photograph that.
  const page = await browser.newPage();
  await page.setViewport({ width: WIDTH + 24, height: 400 });
  await page.evaluate((shots) => {
    document.body.style.cssText = "margin:0;padding:12px;background:#c9ccd1;display:flex;flex-direction:column;gap:12px";
    for (const s of shots) {
      const img = document.createElement("img");
      img.src = "data:image/png;base64," + s;
      img.style.cssText = "display:block;border-radius:6px;box-shadow:0 1px 4px #0003";
      document.body.appendChild(img);
    }
    return Promise.all([...document.images].map((i) => i.decode()));
  }, shots);
  await page.screenshot({ path: out, fullPage: true });
  console.log("wrote " + out);
} finally {
  await browser.close();
  await server.stop();
}
