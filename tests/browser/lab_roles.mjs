// The two lab roles in headless Chromium, for tests/test_browser.py::test_lab_roles_in_chromium.
//
//   node lab_roles.mjs '{"chromium": "/usr/bin/chromium", "learner": "http://127.0.0.1:P/lab?token=...",
//                        "instructor": "http://127.0.0.1:Q/lab?token=...", "formgrader": "http://127.0.0.1:Q/formgrader?token=...",
//                        "assignments": ["nb01_group_advantages", ...], "screenshots": "artifacts/browser", "timeout_s": 180}'
//
// Learner: what the Nbgrader menu and the side bars offer, and the Assignment List panel (no error).
// Instructor: the same menu and side bars, and the formgrader's "Manage Assignments" table listing every
// assignment. Prints one JSON line; screenshots go to opts.screenshots.
import { chromium } from 'playwright-core';

const opts = JSON.parse(process.argv[2]);
const timeout = (opts.timeout_s ?? 180) * 1000;
const shot = (name) => `${opts.screenshots}/${name}.png`;
const log = (...args) => console.error('[browser]', ...args);

const browser = await chromium.launch({
  executablePath: opts.chromium,
  headless: true,
  args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'],
});
const result = { screenshots: [], pageErrors: [] };
let exitCode = 0;

async function labView(url, role) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  page.setDefaultTimeout(timeout);
  page.on('pageerror', (error) => result.pageErrors.push(`${role}: ${String(error)}`));
  await page.goto(url);
  await page.locator('.jp-LabShell').waitFor();
  await page.locator('.lm-MenuBar-itemLabel', { hasText: /^Nbgrader$/ }).waitFor();
  await page.waitForTimeout(1500); // let every plugin add its side-bar tabs
  const tabs = await page.evaluate(() => [...document.querySelectorAll('.jp-SideBar .lm-TabBar-tab')]
    .map((tab) => tab.getAttribute('title') || tab.textContent.trim()).filter(Boolean));
  const files = await page.evaluate(() => [...document.querySelectorAll('.jp-DirListing-itemName')]
    .map((node) => node.textContent.trim()));
  await page.locator('.lm-MenuBar-itemLabel', { hasText: /^Nbgrader$/ }).click();
  const menu = page.locator('.lm-Menu:not(.lm-mod-hidden)').last();
  await menu.waitFor();
  const items = (await menu.locator('.lm-Menu-itemLabel').allTextContents()).map((t) => t.trim()).filter(Boolean);
  await page.screenshot({ path: shot(`lab_${role}_menu`) });
  result.screenshots.push(shot(`lab_${role}_menu`));
  return { page, tabs, files, items };
}

try {
  // ---- learner
  const learner = await labView(opts.learner, 'learner');
  result.learner = { tabs: learner.tabs, files: learner.files, menu: learner.items };
  await learner.page.locator('.lm-Menu-itemLabel', { hasText: /^Assignment List$/ }).click();
  await learner.page.waitForFunction(() => /Released assignments/i.test(document.body.innerText), null, { timeout });
  // the list is loaded by a request to the server: give it time, then read what it shows
  await learner.page.waitForFunction(() => !/Loading, please wait/i.test(document.body.innerText), null, { timeout });
  await learner.page.waitForTimeout(1500);
  result.learner.assignmentList = await learner.page.evaluate(() => document.body.innerText);
  await learner.page.screenshot({ path: shot('lab_learner_assignment_list') });
  result.screenshots.push(shot('lab_learner_assignment_list'));
  log('learner view read');

  // ---- instructor
  const instructor = await labView(opts.instructor, 'instructor');
  result.instructor = { tabs: instructor.tabs, files: instructor.files, menu: instructor.items };
  await instructor.page.keyboard.press('Escape');
  const formgrader = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  formgrader.setDefaultTimeout(timeout);
  formgrader.on('pageerror', (error) => result.pageErrors.push(`formgrader: ${String(error)}`));
  await formgrader.goto(opts.formgrader);
  await formgrader.waitForFunction((names) => {
    const text = document.querySelector('#main-table')?.innerText ?? '';
    return names.every((name) => text.includes(name));
  }, opts.assignments, { timeout });
  result.instructor.formgrader = await formgrader.evaluate(() => ({
    heading: document.querySelector('h1, .page-header, title')?.textContent?.trim() ?? '',
    rows: [...document.querySelectorAll('#main-table tr')].map((row) => row.innerText.replace(/\s+/g, ' ').trim()),
    body: document.body.innerText,
  }));
  await formgrader.screenshot({ path: shot('formgrader_assignments'), fullPage: true });
  result.screenshots.push(shot('formgrader_assignments'));
  log('formgrader read');
} catch (error) {
  console.error(String(error?.stack ?? error));
  for (const [index, page] of browser.contexts().flatMap((c) => c.pages()).entries()) {
    try {
      await page.screenshot({ path: shot(`lab_roles_failure_${index}`) });
      console.error(`failure screenshot: ${shot(`lab_roles_failure_${index}`)}`);
    } catch (inner) { /* page already closed */ }
  }
  exitCode = 1;
} finally {
  await browser.close();
}
console.log(JSON.stringify(result));
process.exit(exitCode);
