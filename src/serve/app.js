// prose-state serve: live updates only; every page works without this script.
"use strict";
(function () {
  // The pending list: fetched again and swapped in at each change committed (server-sent
  // events); every 2 seconds instead where events are not to be had.
  const live = document.getElementById("live");
  if (live && live.dataset.src) {
    const refresh = async () => {
      try {
        const r = await fetch(live.dataset.src, { credentials: "same-origin", cache: "no-store" });
        if (r.ok) live.innerHTML = await r.text();
      } catch (e) { /* the next change, or tick, tries again */ }
    };
    let polling = null;
    const poll = () => { if (!polling) polling = setInterval(refresh, 2000); };
    if (window.EventSource && live.dataset.events) {
      const es = new EventSource(live.dataset.events);
      // Read once the stream is open (what changed between the page and the stream), at
      // each change, and at each ping (the safety net for a change not heard).
      es.addEventListener("open", refresh);
      es.addEventListener("change", refresh);
      es.addEventListener("ping", refresh);
      es.onerror = () => { if (es.readyState === EventSource.CLOSED) poll(); };
    } else {
      poll();
    }
  }
  // A gate's page: each commit to its run (server-sent events, woken by the commit) asks
  // what may have changed, without logging a view; a decision made elsewhere shows at once,
  // and its forms go. Without events (an old browser, the server's bound reached), it asks
  // every 2 seconds instead.
  const facts = document.getElementById("facts");
  if (facts && facts.dataset.status) {
    let asking = false;
    const ask = async () => {
      if (asking) return;
      asking = true;
      try {
        const r = await fetch(facts.dataset.status, { credentials: "same-origin", cache: "no-store" });
        if (!r.ok) return;
        const got = {};
        for (const line of (await r.text()).split("\n")) {
          const at = line.indexOf(" ");
          if (at > 0) got[line.slice(0, at)] = line.slice(at + 1);
        }
        const status = document.getElementById("status");
        if (status && got.status && status.textContent !== got.status) {
          status.textContent = got.status;
          // A row changed behind prose-state's back, or a decision nothing here attests: not
          // a decision this page may call one.
          const unproven = got.integrity === "tampered" || got.integrity === "unattested";
          if (got.status !== "pending" || unproven) {
            for (const form of document.querySelectorAll("div.decide")) form.remove();
            const note = document.getElementById("decided-elsewhere") || document.createElement("p");
            note.className = "note";
            note.id = "decided-elsewhere";
            note.textContent = unproven
              ? "Changed while this page was open, in a way nothing here attests (" + got.integrity +
                "): no decision is shown as made; reload it for the audit."
              : "Decided" + (got.decided_by ? " by " + got.decided_by : "") +
                " while this page was open; reload it for the whole history.";
            status.closest("dl").after(note);
            const audit = document.getElementById("audit");
            if (audit && unproven) audit.textContent = got.integrity + ": reload the page for why";
          }
        }
      } catch (e) { /* the next change asks again */ } finally { asking = false; }
    };
    let polling = null;
    const poll = () => { if (!polling) polling = setInterval(ask, 2000); };
    if (window.EventSource && facts.dataset.events) {
      const es = new EventSource(facts.dataset.events);
      // Asked once the stream is open (what changed since the page was made), at each change,
      // and at each ping (the safety net for a change not heard).
      for (const kind of ["open", "change", "ping"]) es.addEventListener(kind, ask);
      es.onerror = () => { if (es.readyState === EventSource.CLOSED) poll(); };
    } else {
      poll();
    }
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
