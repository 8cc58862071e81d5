"""The approval page in a real browser (Chromium through WebDriver), as a person uses it.

Arguments: BASE_URL TOKEN GATE. Signs in with the token, waits on the pending list until
GATE appears there without a reload (the page's script), opens it, approves it with a
comment, and waits for the page to show it approved. Prints READY once signed in and
watching (the test then opens the gate), PROMPT <text> as the page shows it, and DONE.
"""

import os
import sys

from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

# The shared steps (prose_browser.py) sit beside this script; importing them leaves no
# __pycache__ in the checkout.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True
from prose_browser import approve_shown, chromium, sign_in, text_of  # noqa: E402

base, token, gate = sys.argv[1:4]
driver = chromium()
try:
    sign_in(driver, base, token)
    assert "Nothing is waiting" in text_of(driver, "pending")
    # A mark on this page: still there when the gate shows up, so the page was not reloaded.
    driver.execute_script("window.__watching = true;")
    print("READY", flush=True)

    def gate_link(d):
        try:
            for a in d.find_elements(By.CSS_SELECTOR, "#pending a"):
                if a.text == gate:
                    return a.get_attribute("href")
        except StaleElementReferenceException:
            pass  # swapped by the next refresh: looked at again
        return None

    href = WebDriverWait(driver, 30, poll_frequency=0.2).until(gate_link)
    assert driver.execute_script("return window.__watching === true;"), "the list was reloaded"
    driver.get(href)
    approve_shown(driver, "checked in the browser")
finally:
    driver.quit()
