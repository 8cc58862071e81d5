"""Two people approve one gate that needs both, each in a real browser (Chromium through
WebDriver), as they would.

Arguments: BASE_URL GATE_PATH TOKEN_A TOKEN_B. Each signs in with their token in a browser of
their own, opens the gate's page and approves it. After the first approval the page says the
first person's vote is counted and the gate waits for one more (prints PROGRESS <text> and
VOTED <note>); after the second it shows the gate approved. Prints DONE at the end.
"""

import os
import sys

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

# The shared steps (prose_browser.py) sit beside this script; importing them leaves no
# __pycache__ in the checkout.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True
from prose_browser import chromium, sign_in, text_of  # noqa: E402

base, path, *tokens = sys.argv[1:]


for n, token in enumerate(tokens):
    driver = chromium()
    try:
        sign_in(driver, base, token)
        driver.get(base + path)
        WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.ID, "approve"))
        driver.find_element(By.ID, "approve-comment").send_keys("approved by person %d" % (n + 1))
        driver.find_element(By.CSS_SELECTOR, "#approve button").click()
        if n + 1 < len(tokens):
            # Back on the gate's page: still pending, the vote counted, no form any more.
            WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.ID, "voted"))
            print("PROGRESS " + text_of(driver, "progress"), flush=True)
            print("VOTED " + text_of(driver, "voted"), flush=True)
            assert text_of(driver, "status") == "pending"
        else:
            WebDriverWait(driver, 20).until(lambda d: text_of(d, "status") == "approved")
            print("PROGRESS " + text_of(driver, "progress"), flush=True)
    finally:
        driver.quit()
print("DONE", flush=True)
