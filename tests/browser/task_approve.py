"""A person handed a gate's page by an MCP host (the URL of a task's URL elicitation), in a real
browser (Chromium through WebDriver): opens the URL as given, signs in with the token when the
page asks, comes back to the gate, reads it, approves it with a comment, and waits for the page
to show it approved.

Arguments: URL TOKEN. Prints SIGNED-IN, PROMPT <text> as the page shows it, and DONE.
"""

import os
import sys
from urllib.parse import urlsplit

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

# The shared steps (prose_browser.py) sit beside this script; importing them leaves no
# __pycache__ in the checkout.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True
from prose_browser import approve_shown, chromium, enter_token  # noqa: E402

url, token = sys.argv[1:3]
parts = urlsplit(url)
base = f"{parts.scheme}://{parts.netloc}"
driver = chromium()
driver.set_page_load_timeout(30)
try:
    # The link as the host opened it: a person not signed in is asked to sign in first.
    driver.get(url)
    if not driver.find_elements(By.ID, "approve"):
        if not driver.find_elements(By.ID, "token"):
            driver.get(base + "/login")
        enter_token(driver, token)
        WebDriverWait(driver, 20).until(lambda d: not d.find_elements(By.ID, "token"))
        print("SIGNED-IN", flush=True)
        driver.get(url)
    approve_shown(driver, "approved from the task's link")
finally:
    driver.quit()
