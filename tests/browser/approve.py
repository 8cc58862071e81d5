"""The approval page in a real browser (Chromium through WebDriver), as a person uses it.

Arguments: BASE_URL TOKEN GATE. Signs in with the token, waits on the pending list until
GATE appears there without a reload (the page's script), opens it, approves it with a
comment, and waits for the page to show it approved. Prints READY once signed in and
watching (the test then opens the gate), PROMPT <text> as the page shows it, and DONE.
"""

import sys

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

base, token, gate = sys.argv[1:4]
options = Options()
options.binary_location = "/usr/bin/chromium"
for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
    options.add_argument(flag)
# The Debian driver, never one fetched from the network.
driver = webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=options)
try:
    driver.get(base + "/login")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "form[action='/login'] button").click()
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.ID, "live"))
    assert "Nothing is waiting" in driver.find_element(By.ID, "pending").text
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
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.ID, "approve"))
    print("PROMPT " + driver.find_element(By.ID, "prompt").text, flush=True)
    driver.find_element(By.ID, "approve-comment").send_keys("checked in the browser")
    driver.find_element(By.CSS_SELECTOR, "#approve button").click()
    WebDriverWait(driver, 20).until(
        lambda d: not d.find_elements(By.ID, "approve") and "approved" in d.page_source
    )
    print("DONE", flush=True)
finally:
    driver.quit()
