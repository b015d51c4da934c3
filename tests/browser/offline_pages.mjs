// Pages the course writes to disk (feedback pages, the class report), opened from their files in headless Chromium
// with JavaScript on, for tests/test_browser.py: what ran, what was requested, what was drawn.
//
//   node offline_pages.mjs '{"chromium": "/usr/bin/chromium", "timeout_s": 60, "screenshots": "artifacts/browser",
//                            "pages": [{"name": "feedback", "file": "/abs/page.html", "click": ["#jslink"],
//                                       "wait_ms": 1200, "screenshot": true}]}'
//
// Every request but the page's own file is recorded and aborted (nothing leaves the machine); a script that ran
// shows as a request (the test's payloads load an image from http://127.0.0.1:9/hit/<name>), a changed title or a
// dialog. Per page: requests, dialogs, title, page errors, console messages, the number of MathML formulas and of
// inline SVG figures and how many have a size, images and how many decoded, the page's text. Prints one JSON line.
import { chromium } from 'playwright-core';

const opts = JSON.parse(process.argv[2]);
const timeout = (opts.timeout_s ?? 60) * 1000;
const browser = await chromium.launch({
  executablePath: opts.chromium,
  headless: true,
  args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'],
});
const result = {};
let exitCode = 0;
try {
  for (const spec of opts.pages) {
    const context = await browser.newContext({ viewport: { width: 1200, height: 900 } });
    const self = `file://${spec.file}`;
    const seen = { requests: [], dialogs: [], pageErrors: [], console: [] };
    await context.route('**/*', (route) => {
      const url = route.request().url();
      if (url === self) return route.continue();
      seen.requests.push(url);
      return route.abort();
    });
    const page = await context.newPage();
    page.setDefaultTimeout(timeout);
    page.on('dialog', (dialog) => { seen.dialogs.push(dialog.message()); dialog.dismiss().catch(() => {}); });
    page.on('pageerror', (error) => seen.pageErrors.push(String(error)));
    page.on('console', (message) => seen.console.push(message.text()));
    await page.goto(self);
    for (const selector of spec.click ?? []) {
      const target = page.locator(selector).first();
      if (await target.count()) await target.click({ timeout: 5000 }).catch((e) => seen.pageErrors.push(String(e)));
    }
    await page.waitForTimeout(spec.wait_ms ?? 1200); // timers, a meta refresh of one second
    const view = await page.evaluate(() => {
      const maths = [...document.querySelectorAll('math')];
      const images = [...document.querySelectorAll('img')];
      const svgs = [...document.querySelectorAll('svg')];
      const drawn = (e) => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
      return {
        url: location.href,
        title: document.title,
        maths: maths.length,
        mathsDrawn: maths.filter(drawn).length,
        svgs: svgs.length,
        svgsDrawn: svgs.filter(drawn).length,
        images: images.length,
        imagesDrawn: images.filter((i) => i.complete && i.naturalWidth > 0).length,
        text: document.body ? document.body.innerText : '',
      };
    });
    if (opts.screenshots && spec.screenshot !== false) {
      await page.screenshot({ path: `${opts.screenshots}/${spec.name}.png`, fullPage: true });
    }
    result[spec.name] = { ...seen, ...view };
    await context.close();
  }
} catch (error) {
  console.error(String(error?.stack ?? error));
  exitCode = 1;
} finally {
  await browser.close();
}
console.log(JSON.stringify(result));
process.exitCode = exitCode;
