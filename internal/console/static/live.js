// Keeps the overview's counts current: every ten seconds it reads
// /console/counts.json and writes each count into the element marked
// data-live="<state>". The page is complete without it.
"use strict";
(function () {
  const cells = document.querySelectorAll("[data-live]");
  if (cells.length === 0) return;
  async function refresh() {
    try {
      const r = await fetch("/console/counts.json", { credentials: "same-origin", cache: "no-store" });
      if (!r.ok) return;
      const data = await r.json();
      for (const el of cells) {
        const name = el.getAttribute("data-live");
        if (name === "oldest_pending") {
          el.textContent = data.oldest_pending;
        } else {
          el.textContent = String((data.states && data.states[name]) || 0);
        }
      }
    } catch (e) {
      // A missed refresh shows the last counts; the next one tries again.
    }
  }
  setInterval(refresh, 10000);
})();
