// Opens a notebook in a JupyterLab that tests/test_browser.py serves, runs all cells through the
// menu (Run -> Run All Cells) in headless Chromium, and reports what the page shows as JSON.
//
//   node run_notebook.mjs '{"chromium": "/usr/bin/chromium", "url": "http://127.0.0.1:PORT/lab/tree/...?token=...",
//                           "screenshots": "artifacts/browser", "name": "nb01", "timeout_s": 240}'
//
// Uses playwright-core only (no browser download): Debian's Chromium is given as executablePath.
import { chromium } from 'playwright-core';

const opts = JSON.parse(process.argv[2]);
const timeout = (opts.timeout_s ?? 240) * 1000;
const shot = (suffix) => `${opts.screenshots}/${opts.name}_${suffix}.png`;
const log = (...args) => console.error('[browser]', ...args);

const browser = await chromium.launch({
  executablePath: opts.chromium,
  headless: true,
  args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'],
});
let exitCode = 0;
const page = await browser.newPage({ viewport: { width: 1400, height: 1100 } });
try {
  page.setDefaultTimeout(timeout);
  const consoleErrors = [];
  page.on('pageerror', (error) => consoleErrors.push(String(error)));

  await page.goto(opts.url);
  const notebook = page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook');
  await notebook.waitFor();
  // The kernel must be up before "Run All" (the toolbar shows its status).
  // The toolbar's execution indicator reads "Kernel status: Idle" once the kernel is up.
  const kernelIdle = () => /Kernel status:\s*Idle/i.test(
    document.querySelector('.jp-NotebookPanel .jp-Notebook-ExecutionIndicator')?.textContent ?? '');
  await page.waitForFunction(kernelIdle, null, { timeout });
  // The indicator can read Idle before the page's websocket to the kernel is open (commands sent
  // then are lost): wait until the server counts a connection to an idle kernel.
  const origin = new URL(opts.url);
  const kernelsUrl = `${origin.origin}/api/kernels?token=${origin.searchParams.get('token')}`;
  const connectDeadline = Date.now() + timeout;
  for (;;) {
    // (a server still starting the kernel may answer 500 with an error object: not yet, ask again)
    const response = await page.request.get(kernelsUrl);
    const kernels = response.ok() ? await response.json() : [];
    if (Array.isArray(kernels) && kernels.some((k) => k.connections >= 1 && k.execution_state === 'idle')) break;
    if (Date.now() > connectDeadline) throw new Error(`no connected idle kernel: ${JSON.stringify(kernels)}`);
    await page.waitForTimeout(500);
  }
  log('kernel connected and idle, running all cells');

  await page.locator('.lm-MenuBar-itemLabel', { hasText: /^Run$/ }).click();
  await page.locator('.lm-Menu-itemLabel', { hasText: /^Run All Cells$/ }).click();

  // Done when no cell waits ([*]) and the kernel is idle again, twice in a row half a second apart.
  const settled = async () => page.evaluate(() => {
    const prompts = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')].map((p) => p.textContent.trim());
    const idle = /Kernel status:\s*Idle/i.test(
      document.querySelector('.jp-NotebookPanel .jp-Notebook-ExecutionIndicator')?.textContent ?? '');
    const anyRan = prompts.some((p) => /\[\d+\]/.test(p));
    return anyRan && !prompts.some((p) => p.includes('*')) && idle;
  });
  const deadline = Date.now() + timeout;
  let stable = 0;
  while (stable < 2) {
    if (Date.now() > deadline) throw new Error('cells did not finish running in time');
    stable = (await settled()) ? stable + 1 : 0;
    await page.waitForTimeout(500);
  }
  log('execution settled');

  const report = await page.evaluate(() => {
    const cells = [...document.querySelectorAll('.jp-Notebook > .jp-WindowedPanel-outer .jp-Cell, .jp-Notebook .jp-Cell')];
    const unique = [...new Set(cells)];
    return unique.map((cell, index) => {
      const kind = cell.classList.contains('jp-CodeCell') ? 'code' : cell.classList.contains('jp-MarkdownCell') ? 'markdown' : 'raw';
      const prompt = cell.querySelector('.jp-InputPrompt')?.textContent.trim() ?? '';
      const errors = [...cell.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
        .map((node) => node.textContent);
      const headings = [...cell.querySelectorAll('.jp-RenderedMarkdown h1, .jp-RenderedMarkdown h2')]
        .map((h) => h.textContent.replace(/¶\s*$/, '').trim());
      const outputs = [...cell.querySelectorAll('.jp-OutputArea-output')].map((node) => node.textContent);
      return { index, kind, prompt, errors, headings, outputs };
    });
  });

  // Screenshots: the rendered 导读 heading (with the bootstrap's output above it) and the first error.
  const intro = page.locator('.jp-RenderedMarkdown :is(h1, h2)', { hasText: opts.heading ?? '导读' }).first();
  if (await intro.count()) {
    await intro.evaluate((node) => node.scrollIntoView({ block: 'center' }));
    await page.waitForTimeout(500);
  }
  await page.screenshot({ path: shot('intro') });
  const firstError = page.locator('.jp-Notebook .jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]').first();
  if (await firstError.count()) {
    await firstError.evaluate((node) => node.scrollIntoView({ block: 'center' }));
    await page.waitForTimeout(500);
  }
  await page.screenshot({ path: shot('first_todo') });
  console.log(JSON.stringify({ cells: report, pageErrors: consoleErrors, screenshots: [shot('intro'), shot('first_todo')] }));
} catch (error) {
  console.error(String(error?.stack ?? error));
  // What the page showed when it failed: prompts, kernel indicator, a screenshot.
  try {
    const state = await page.evaluate(() => ({
      prompts: [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')].map((p) => p.textContent.trim()),
      indicator: document.querySelector('.jp-NotebookPanel .jp-Notebook-ExecutionIndicator')?.textContent ?? null,
      dialogs: [...document.querySelectorAll('.jp-Dialog')].map((d) => d.textContent.slice(0, 300)),
    }));
    console.error('page state:', JSON.stringify(state));
    await page.screenshot({ path: shot('failure') });
    console.error('failure screenshot:', shot('failure'));
  } catch (inner) {
    console.error('could not read the page state:', String(inner));
  }
  exitCode = 1;
} finally {
  await browser.close();
}
process.exit(exitCode);
