"""The approval page, live, in a real browser (Chromium through WebDriver): a decision made
elsewhere reaches pages a person has open, without a reload.

Arguments: BASE_URL TOKEN RUN GATE OTHER MODE. Signs in with the token; one window shows the
pending list (GATE and OTHER pending in run RUN), another GATE's page with its forms. MODE says
how the pages may hear of a change:
- `events`: as a browser does (the script checks that each page's event stream is open);
- `no-eventsource`: `window.EventSource` is deleted before any script of the page runs (the
  DevTools command Page.addScriptToEvaluateOnNewDocument), as in a browser without it;
- `bound`: the server's bound on event streams is reached (the test holds them all), so each
  page's stream is refused (503) and closed.
Marks each page (a JavaScript value a reload would lose), prints READY, and reads a line from
stdin: the test has approved GATE elsewhere (on the command line). Then waits, at most 15 s
each, for the gate's page to show the decision and lose its forms, and for the list to drop
GATE and keep OTHER, both without a reload (the marks are still there). Prints what it saw
(GATE_PAGE <status>, NOTE <text>, LIST <gate ids>), how long each took after the decision
was committed (SHOWN_AFTER / DROPPED_AFTER, for information only: nothing asserts a time),
and DONE.
"""

import os
import sys
import time

from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

# The shared steps (prose_browser.py) sit beside this script; importing them leaves no
# __pycache__ in the checkout.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True
from prose_browser import chromium, sign_in, text_of  # noqa: E402

base, token, run, gate, other, mode = sys.argv[1:7]
assert mode in ("events", "no-eventsource", "bound"), mode

# Run in each page before its own scripts: no EventSource at all, or one that keeps each
# stream the page opens where the test can see it.
if mode == "no-eventsource":
    BEFORE = "delete window.EventSource;"
else:
    BEFORE = """
      (() => {
        const Real = window.EventSource;
        window.__streams = [];
        window.EventSource = class extends Real {
          constructor(url, init) { super(url, init); window.__streams.push(this); }
        };
      })();
    """

driver = chromium()


def prepare():
    """The script above, for every document this window loads from now on."""
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": BEFORE})


def streams_settled(d):
    """Each stream the page opened is open (`events`) or refused and closed (`bound`)."""
    if mode == "no-eventsource":
        return d.execute_script("return typeof window.EventSource === 'undefined';")
    want = 1 if mode == "events" else 2  # EventSource.OPEN, EventSource.CLOSED
    states = d.execute_script("return (window.__streams || []).map(s => s.readyState);")
    return len(states) == 1 and states[0] == want


def listed(d):
    """The gate ids the pending list shows now (None while it is being swapped)."""
    try:
        return sorted(a.text for a in d.find_elements(By.CSS_SELECTOR, "#pending a"))
    except StaleElementReferenceException:
        return None


try:
    prepare()
    sign_in(driver, base, token)
    # Both gates listed (the list is swapped as its stream opens, or at each poll).
    WebDriverWait(driver, 20, poll_frequency=0.1).until(lambda d: listed(d) == sorted([gate, other]))
    WebDriverWait(driver, 20, poll_frequency=0.1).until(streams_settled)
    driver.execute_script("window.__mark = 'list';")
    list_window = driver.current_window_handle

    driver.switch_to.new_window("window")
    prepare()
    driver.get("%s/runs/%s/gates/%s" % (base, run, gate))
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.ID, "approve"))
    assert text_of(driver, "status") == "pending"
    WebDriverWait(driver, 20, poll_frequency=0.1).until(streams_settled)
    driver.execute_script("window.__mark = 'gate';")
    gate_window = driver.current_window_handle
    print("READY", flush=True)

    line = sys.stdin.readline()
    assert line.strip() == "APPROVED", repr(line)
    decided = time.monotonic()

    # Both windows watched at once, each until it shows the change (15 s at most).
    shown = dropped = None
    while shown is None or dropped is None:
        if time.monotonic() - decided > 15:
            raise AssertionError(
                "no change shown within 15 s: gate page %s, list %s"
                % ("shown" if shown else "unchanged", "dropped" if dropped else "unchanged")
            )
        if shown is None:
            driver.switch_to.window(gate_window)
            if text_of(driver, "status") != "pending":
                shown = time.monotonic() - decided
        if dropped is None:
            driver.switch_to.window(list_window)
            now = listed(driver)
            if now is not None and gate not in now:
                dropped = time.monotonic() - decided
        time.sleep(0.05)

    driver.switch_to.window(gate_window)
    assert driver.execute_script("return window.__mark;") == "gate", "the gate's page was reloaded"
    assert not driver.find_elements(By.CSS_SELECTOR, "div.decide"), "forms still shown"
    assert not driver.find_elements(By.ID, "approve"), "the approve form still shown"
    assert not driver.find_elements(By.ID, "reject"), "the reject form still shown"
    print("GATE_PAGE " + text_of(driver, "status"), flush=True)
    print("NOTE " + text_of(driver, "decided-elsewhere"), flush=True)
    print("SHOWN_AFTER %.3f s" % shown, flush=True)

    driver.switch_to.window(list_window)
    assert driver.execute_script("return window.__mark;") == "list", "the list was reloaded"
    # The list as it settles: read until a read holds that still shows the other gate (a read
    # may meet the list mid-swap), never once; what it last read is printed either way.
    last = []

    def settled(d):
        last.append(listed(d))
        return last[-1] is not None and other in last[-1]

    try:
        WebDriverWait(driver, 20, poll_frequency=0.05).until(settled)
    except TimeoutException:
        pass
    print("LIST " + " ".join(last[-1] or ["?"]), flush=True)
    print("DROPPED_AFTER %.3f s" % dropped, flush=True)
    # Still what the pages were told at first: the streams neither came back nor were needed.
    for handle in (gate_window, list_window):
        driver.switch_to.window(handle)
        assert streams_settled(driver), "the page's streams changed state"
    print("DONE", flush=True)
finally:
    driver.quit()
