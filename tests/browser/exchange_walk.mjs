// The nbgrader exchange as an instructor and a learner use it, in headless Chromium, for
// tests/test_browser.py::test_exchange_walk_and_offline_feedback_in_chromium. Two phases (the test grades in between):
//
//   node exchange_walk.mjs '{"phase": "exchange", "chromium": "/usr/bin/chromium", "learner": "http://.../lab?token=...",
//                            "formgrader": "http://.../formgrader?token=...", "assignment": "nb01_group_advantages",
//                            "checkpoint": "fetched/nb01_group_advantages/nb01_group_advantages.ipynb",
//                            "screenshots": "artifacts/browser", "timeout_s": 180}'
//     formgrader: Release -> learner's Assignment List: Fetch, (a checkpoint, as a save makes), Submit ->
//     formgrader: Collect, the learner's name on Manage Submissions, and the Autograde button's answer.
//   node exchange_walk.mjs '{"phase": "feedback", ..., "feedback_file": "/abs/path/to/feedback.html"}'
//     formgrader: Generate Feedback and its answer; the submission's page ("submission": its URL, optional); then the
//     feedback page opened with the network off.
//
// Prints one JSON line; screenshots go to opts.screenshots.
import { chromium } from 'playwright-core';

const opts = JSON.parse(process.argv[2]);
const timeout = (opts.timeout_s ?? 180) * 1000;
const shot = (name) => `${opts.screenshots}/${name}.png`;
const log = (...args) => console.error('[browser]', ...args);
const formgraderPage = (path) => opts.formgrader.replace('/formgrader?', `/formgrader/${path}?`);

const browser = await chromium.launch({
  executablePath: opts.chromium,
  headless: true,
  args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'],
});
const result = { screenshots: [], pageErrors: [] };
let exitCode = 0;

async function newPage(role) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  page.setDefaultTimeout(timeout);
  page.on('pageerror', (error) => result.pageErrors.push(`${role}: ${String(error)}`));
  return page;
}

async function save(page, name, fullPage = true) {
  await page.screenshot({ path: shot(name), fullPage });
  result.screenshots.push(shot(name));
}

// Click the link in column `column` (a class of nbgrader's table cells) of the row naming `name`; return the text of
// the modal nbgrader opens with the server's answer, after closing it.
async function clickAndReadModal(page, column, name, screenshot) {
  const row = page.locator('#main-table tr', { hasText: name }).first();
  await row.locator(`td.${column} a`).click();
  const modal = page.locator('.modal.in .modal-content');
  await modal.waitFor();
  const text = (await modal.innerText()).trim();
  if (screenshot) await save(page, screenshot);
  await page.locator('.modal.in .modal-footer button').click();
  await page.locator('.modal.in').waitFor({ state: 'detached' });
  return text;
}

async function formgraderTable(path, name) {
  const page = await newPage('formgrader');
  await page.goto(formgraderPage(path));
  await page.locator('#main-table tr', { hasText: name }).first().waitFor();
  return page;
}

try {
  if (opts.phase === 'exchange') {
    // ---- instructor: release
    let fg = await formgraderTable('manage_assignments', opts.assignment);
    result.release = await clickAndReadModal(fg, 'release', opts.assignment);
    log('released');

    // ---- learner: fetch, a checkpoint (what JupyterLab's save makes), submit
    const learner = await newPage('learner');
    await learner.goto(opts.learner);
    await learner.locator('.jp-LabShell').waitFor();
    await learner.locator('.lm-MenuBar-itemLabel', { hasText: /^Nbgrader$/ }).click();
    await learner.locator('.lm-Menu-itemLabel', { hasText: /^Assignment List$/ }).click();
    await learner.waitForFunction(() => /Released assignments/i.test(document.body.innerText), null, { timeout });
    const fetch = learner.locator('button', { hasText: /^Fetch$/ });
    await fetch.first().waitFor();
    result.fetchOffered = await fetch.count();
    await fetch.first().click();
    const submit = learner.locator('button', { hasText: /^Submit$/ });
    await submit.first().waitFor();
    log('fetched');
    const token = new URL(opts.learner).searchParams.get('token');
    result.checkpoint = await learner.evaluate(async ([path, token]) => {
      const reply = await fetch(`/api/contents/${path}/checkpoints`, {
        method: 'POST', headers: { Authorization: `token ${token}` } });
      return reply.status;
    }, [opts.checkpoint, token]);
    await submit.first().click();
    await learner.waitForFunction(() => /Submitted assignments[\s\S]*\d{4}-\d\d-\d\d/.test(document.body.innerText),
      null, { timeout });
    await save(learner, 'exchange_learner_submitted');
    result.learnerList = await learner.evaluate(() => document.body.innerText.slice(0, 3000));
    log('submitted');

    // ---- instructor: collect, the learner's name, the Autograde button
    fg = await formgraderTable('manage_assignments', opts.assignment);
    result.collect = await clickAndReadModal(fg, 'collect', opts.assignment);
    log('collected');
    // (the page reached through the table's "# Submissions" link: its requests carry the page's login)
    await fg.reload();
    const count = fg.locator('#main-table tr', { hasText: opts.assignment }).first().locator('td.num-submissions a');
    await count.waitFor();
    await count.click();
    const submissions = fg;
    await submissions.locator('#main-table tr', { hasText: opts.learner_id }).first().waitFor();
    result.submissionRows = await submissions.evaluate(() => [...document.querySelectorAll('#main-table tr')]
      .map((row) => row.innerText.replace(/\s+/g, ' ').trim()));
    result.autograde = await clickAndReadModal(submissions, 'autograde', opts.learner_id, 'formgrader_autograde_refused');
    log('autograde button answered');
  } else {
    // ---- instructor: Generate Feedback (the course's make feedback)
    const fg = await formgraderTable('manage_assignments', opts.assignment);
    result.generateFeedback = await clickAndReadModal(fg, 'generate-feedback', opts.assignment, 'formgrader_feedback');
    log('feedback generated');

    // ---- the formgrader's page of the graded submission (the course's sanitising exporter renders it)
    if (opts.submission) {
      const view = await newPage('formgrade');
      await view.goto(opts.submission);
      await view.locator('#notebook-container').first().waitFor();
      await view.waitForFunction(() => document.querySelectorAll('input.score').length > 0, null, { timeout });
      result.submissionPage = await view.evaluate(() => ({
        gradeCells: document.querySelectorAll('.nbgrader_cell').length,
        scoreInputs: document.querySelectorAll('input.score').length,
        maths: document.querySelectorAll('math').length,
        text: document.body.innerText.slice(0, 2000),
      }));
      await save(view, 'formgrader_submission', false);
      log('submission page shown');
    }

    // ---- the feedback page with the network off: every request that is not the file itself fails
    const context = await browser.newContext({ viewport: { width: 1200, height: 900 }, offline: true });
    const requests = [];
    await context.route('**/*', (route) => {
      const url = route.request().url();
      if (url.startsWith('file://')) return route.continue();
      requests.push(url);
      return route.abort();
    });
    const page = await context.newPage();
    page.setDefaultTimeout(timeout);
    await page.goto(`file://${opts.feedback_file}`);
    await page.waitForTimeout(1000);
    result.feedback = await page.evaluate(() => {
      const maths = [...document.querySelectorAll('math')];
      const sizes = maths.map((m) => { const r = m.getBoundingClientRect(); return [r.width, r.height]; });
      const fractions = [...document.querySelectorAll('math mfrac')].map((f) => f.getBoundingClientRect().height);
      const text = document.body.innerText;
      return { maths: maths.length, drawn: sizes.filter(([w, h]) => w > 0 && h > 0).length, fractions,
               lineHeight: parseFloat(getComputedStyle(document.body).fontSize), text: text.slice(0, 3000),
               rawTex: (text.match(/\\(frac|hat|sum|operatorname|mathrm|text)\b/g) || []).length };
    });
    result.blockedRequests = requests;
    await page.locator('math[display="block"]').first().scrollIntoViewIfNeeded();
    await save(page, 'feedback_offline', false);
    await context.close();
  }
} catch (error) {
  console.error(String(error?.stack ?? error));
  for (const [index, page] of browser.contexts().flatMap((c) => c.pages()).entries()) {
    try {
      await page.screenshot({ path: shot(`exchange_failure_${index}`) });
      console.error(`failure screenshot: ${shot(`exchange_failure_${index}`)}`);
    } catch (inner) { /* page already closed */ }
  }
  exitCode = 1;
} finally {
  await browser.close();
}
console.log(JSON.stringify(result));
process.exitCode = exitCode; // (not process.exit(): a piped stdout is flushed before node exits)
