// Opens a River UI job page in headless Chromium, the way an operator's
// browser does, and prints what the page shows as JSON on stdout:
// {"unauthenticated": <status without credentials>, "status": <status>,
//  "text": <the page's text>}.
//
// Environment: CHROME_PATH (Chromium's binary), RIVERUI_URL (such as
// http://127.0.0.1:8080/riverui), RIVERUI_USER, RIVERUI_PASSWORD, JOB_ID,
// WAIT_FOR (text the page must come to show), and SCREENSHOT (optional: a
// PNG path to save the page to).
import puppeteer from "puppeteer-core";

const env = process.env;
for (const name of ["CHROME_PATH", "RIVERUI_URL", "RIVERUI_USER", "RIVERUI_PASSWORD", "JOB_ID", "WAIT_FOR"]) {
  if (!env[name]) {
    console.error(`riverui_check: ${name} is not set`);
    process.exit(2);
  }
}

const browser = await puppeteer.launch({
  executablePath: env.CHROME_PATH,
  headless: true,
  // Root (CI) cannot use Chromium's sandbox.
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
try {
  const url = `${env.RIVERUI_URL}/jobs/${env.JOB_ID}`;

  // Without credentials, River UI must refuse (a browser would ask for
  // them; Chromium headless gives up, so ask as a plain client does).
  const unauthenticated = (await fetch(url)).status;

  const page = await browser.newPage();
  await page.setViewport({ width: 1400, height: 1000 });
  await page.authenticate({ username: env.RIVERUI_USER, password: env.RIVERUI_PASSWORD });
  const response = await page.goto(url, { waitUntil: "networkidle0", timeout: 30000 });
  // River UI's JSON viewer folds nested objects ("… 3 keys"), such as the
  // job's output inside its metadata: unfold them as an operator would.
  await page.waitForFunction(() => document.body.innerText.includes("Metadata"), { timeout: 30000 });
  for (let round = 0; round < 5; round++) {
    const clicked = await page.evaluate(() => {
      let n = 0;
      for (const el of document.querySelectorAll("body *")) {
        if (el.children.length === 0 && /^…\s*\d+\s+keys?$/.test(el.textContent.trim())) {
          (el.closest("button") || el).click();
          n++;
        }
      }
      return n;
    });
    if (clicked === 0) break;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  if (env.SCREENSHOT) {
    await page.screenshot({ path: env.SCREENSHOT, fullPage: true });
  }
  await page.waitForFunction((text) => document.body.innerText.includes(text), { timeout: 30000 }, env.WAIT_FOR);
  const text = await page.evaluate(() => document.body.innerText);
  console.log(JSON.stringify({ unauthenticated, status: response ? response.status() : 0, text }));
} finally {
  await browser.close();
}
