// prose-state serve: live updates only; every page works without this script.
"use strict";
(function () {
  // The pending list: fetched again every 2 seconds and swapped in.
  const live = document.getElementById("live");
  if (live && live.dataset.src) {
    setInterval(async () => {
      try {
        const r = await fetch(live.dataset.src, { credentials: "same-origin", cache: "no-store" });
        if (r.ok) live.innerHTML = await r.text();
      } catch (e) { /* the next tick tries again */ }
    }, 2000);
  }
  // Deadline countdowns: the time left, each second, from the deadline the server gave.
  const human = (s) => {
    if (s <= 0) return "0s";
    const d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600),
          m = Math.floor(s % 3600 / 60), sec = s % 60;
    return d ? `${d}d ${h}h` : h ? `${h}h ${m}m` : m ? `${m}m ${sec}s` : `${sec}s`;
  };
  const tick = () => {
    for (const el of document.querySelectorAll("[data-deadline]")) {
      const at = Date.parse(el.dataset.deadline.replace(" ", "T") + "Z");
      if (!isNaN(at)) el.textContent = human(Math.floor((at - Date.now()) / 1000));
    }
  };
  setInterval(tick, 1000);
})();
