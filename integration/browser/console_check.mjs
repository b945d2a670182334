// Drives the operator console in headless Chromium as an operator and a
// reader would, runs axe-core on every page, and prints what happened as
// JSON on stdout (integration/console_browser_test.go checks it, and the
// database and the Stripe stand-in).
//
// Environment: CHROME_PATH, CONSOLE_URL (such as
// http://127.0.0.1:8080/console), OPERATOR_TOKEN, READER_TOKEN,
// UNKNOWN_KEY (an unknown intent to resolve as succeeded), APPROVE_KEY (an
// intent awaiting approval: first a forged args_sha256, then approved),
// KEEP_KEY (an intent awaiting approval that nobody may release: the
// reader's forged POST and the cross-site POST aim at it), NAMESPACE, and
// SCREENSHOT_DIR (optional: a directory to save each page to).
import http from "node:http";
import { createRequire } from "node:module";
import path from "node:path";
import puppeteer from "puppeteer-core";

const env = process.env;
for (const name of ["CHROME_PATH", "CONSOLE_URL", "OPERATOR_TOKEN", "READER_TOKEN", "UNKNOWN_KEY", "APPROVE_KEY", "KEEP_KEY", "NAMESPACE"]) {
  if (!env[name]) {
    console.error(`console_check: ${name} is not set`);
    process.exit(2);
  }
}
const base = env.CONSOLE_URL.replace(/\/$/, "");
const axePath = createRequire(import.meta.url).resolve("axe-core");
const intentPath = (key) => `/console/intents/${encodeURIComponent(env.NAMESPACE)}/${encodeURIComponent(key)}`;
const out = { axe: {}, steps: {} };

const browser = await puppeteer.launch({
  executablePath: env.CHROME_PATH,
  headless: true,
  // Root (CI) cannot use Chromium's sandbox.
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});

// newPage opens a page in a fresh browser context: its own cookies, as a
// second person's browser.
async function newPage() {
  const context = await browser.createBrowserContext();
  const page = await context.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  // axe-core is injected as a script, which the console's CSP (script-src
  // 'self') would refuse; the console's own pages are what is checked.
  await page.setBypassCSP(true);
  return page;
}

// check runs axe-core on the page and keeps its serious and critical
// violations under name; it saves a screenshot too.
async function check(page, name) {
  await page.addScriptTag({ path: axePath });
  const result = await page.evaluate(async () => await globalThis.axe.run(document));
  out.axe[name] = result.violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map((n) => n.target.join(" ")).slice(0, 5) }));
  if (env.SCREENSHOT_DIR) {
    await page.screenshot({ path: path.join(env.SCREENSHOT_DIR, `${name}.png`), fullPage: true });
  }
}

async function signIn(page, token) {
  const response = await page.goto(`${base}/`, { waitUntil: "load" });
  const redirected = page.url().includes("/console/login");
  await page.type("#token", token);
  await Promise.all([page.waitForNavigation({ waitUntil: "load" }), page.click("form[action='/console/login'] button[type=submit]")]);
  return { redirected, status: response.status() };
}

const text = (page) => page.evaluate(() => document.body.innerText);

try {
  // The operator.
  const op = await newPage();
  {
    const response = await op.goto(`${base}/`, { waitUntil: "load" });
    out.steps.unauthenticated = { url: op.url(), status: response.status(), text: await text(op) };
    await check(op, "login");
  }
  out.steps.operatorSignIn = await signIn(op, env.OPERATOR_TOKEN);
  out.steps.operatorSignIn.url = op.url();
  await check(op, "overview");

  await op.goto(`${base}/intents`, { waitUntil: "load" });
  await check(op, "intents");
  await op.goto(`${base}/intents?state=succeeded&key=${encodeURIComponent("no-such-prefix")}`, { waitUntil: "load" });
  await check(op, "intents-filtered");

  // The unknown queue: resolve one as succeeded, with a note.
  await op.goto(`${base}/unknown`, { waitUntil: "load" });
  await check(op, "unknown");
  {
    const form = `form[action='${intentPath(env.UNKNOWN_KEY)}/resolve']`;
    await op.click(`${form} input[value=succeeded]`);
    await op.type(`${form} input[name=note]`, "found in the mailbox");
    const [response] = await Promise.all([op.waitForNavigation({ waitUntil: "load" }), op.click(`${form} button[type=submit]`)]);
    out.steps.resolve = { status: response.status(), url: op.url(), text: await text(op) };
    await check(op, "intent-resolved");
  }

  // Approvals: a form whose args_sha256 is not what the page showed is
  // refused; the form as shown approves.
  await op.goto(`${base}/approvals`, { waitUntil: "load" });
  await check(op, "approvals");
  out.steps.operatorApproveButtons = await op.$$eval("form button", (bs) => bs.filter((b) => /Approve|Deny/.test(b.textContent)).length);
  {
    const form = `form[action='${intentPath(env.APPROVE_KEY)}/approve']`;
    await op.$eval(`${form} input[name=args_sha256]`, (el) => { el.value = "0".repeat(64); });
    const [response] = await Promise.all([op.waitForNavigation({ waitUntil: "load" }), op.click(`${form} button:not([formaction])`)]);
    out.steps.mismatch = { status: response.status(), text: await text(op) };
    await check(op, "approval-mismatch");
  }
  await op.goto(`${base}/approvals`, { waitUntil: "load" });
  {
    const form = `form[action='${intentPath(env.APPROVE_KEY)}/approve']`;
    await op.type(`${form} input[name=note]`, "called the customer");
    const [response] = await Promise.all([op.waitForNavigation({ waitUntil: "load" }), op.click(`${form} button:not([formaction])`)]);
    out.steps.approve = { status: response.status(), url: op.url(), text: await text(op) };
    await check(op, "intent-approved");
  }

  // Bulk cancel's preview (of nothing: the check must cancel nothing).
  await op.goto(`${base}/bulk/cancel?key=${encodeURIComponent("no-such-prefix")}`, { waitUntil: "load" });
  out.steps.bulk = { text: await text(op) };
  await check(op, "bulk-cancel");

  // A cross-site POST: a page on another origin (another port of this
  // host, so same-site, and the SameSite=Strict cookie is sent) posts a
  // form that would release KEEP_KEY; CrossOriginProtection refuses it.
  await op.goto(`${base}/approvals`, { waitUntil: "load" });
  const keepSHA = await op.$eval(`form[action='${intentPath(env.KEEP_KEY)}/approve'] input[name=args_sha256]`, (el) => el.value).catch(() => "");
  out.steps.keepFound = keepSHA !== "";
  const target = new URL(`${base}/intents/${encodeURIComponent(env.NAMESPACE)}/${encodeURIComponent(env.KEEP_KEY)}/approve`);
  const evil = http.createServer((req, res) => {
    res.writeHead(200, { "Content-Type": "text/html" });
    res.end(`<!DOCTYPE html><html lang="en"><title>evil</title><body>
      <form id="f" method="post" action="${target.href}"><input name="args_sha256" value="${keepSHA}"><input name="note" value="forged"><button id="go">Win a prize</button></form></body></html>`);
  });
  await new Promise((resolve) => evil.listen(0, "127.0.0.1", resolve));
  try {
    await op.goto(`http://127.0.0.1:${evil.address().port}/`, { waitUntil: "load" });
    const [response] = await Promise.all([op.waitForNavigation({ waitUntil: "load" }), op.click("#go")]);
    out.steps.crossSite = { status: response.status(), url: op.url(), text: await text(op) };
  } finally {
    evil.close();
  }

  // The reader: sees the approvals and the unknown queue, no button, and a
  // forged POST from its own page is 403.
  const reader = await newPage();
  out.steps.readerSignIn = await signIn(reader, env.READER_TOKEN);
  for (const [name, url] of [["reader-approvals", `${base}/approvals`], ["reader-intent", `${base}${intentPath(env.KEEP_KEY).slice("/console".length)}`]]) {
    await reader.goto(url, { waitUntil: "load" });
    await check(reader, name);
    out.steps[name] = {
      text: await text(reader),
      buttons: await reader.$$eval("main button, main input[type=submit]", (bs) => bs.length),
      postForms: await reader.$$eval("main form[method=post]", (fs) => fs.length),
    };
  }
  out.steps.readerForged = await reader.evaluate(async (url, sha) => {
    const r = await fetch(url, { method: "POST", body: new URLSearchParams({ args_sha256: sha, note: "reader" }), redirect: "manual" });
    return { status: r.status, text: await r.text() };
  }, target.href, keepSHA);

  console.log(JSON.stringify(out));
} finally {
  await browser.close();
}
