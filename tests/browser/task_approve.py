"""A person handed a gate's page by an MCP host (the URL of a task's URL elicitation), in a real
browser (Chromium through WebDriver): opens the URL as given, signs in with the token when the
page asks, comes back to the gate, reads it, approves it with a comment, and waits for the page
to show it approved.

Arguments: URL TOKEN. Prints SIGNED-IN, PROMPT <text> as the page shows it, and DONE.
"""

import sys
from urllib.parse import urlsplit

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

url, token = sys.argv[1:3]
parts = urlsplit(url)
base = f"{parts.scheme}://{parts.netloc}"
options = Options()
options.binary_location = "/usr/bin/chromium"
for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
    options.add_argument(flag)
# The Debian driver, never one fetched from the network.
driver = webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=options)
driver.set_page_load_timeout(30)
try:
    # The link as the host opened it: a person not signed in is asked to sign in first.
    driver.get(url)
    if not driver.find_elements(By.ID, "approve"):
        if not driver.find_elements(By.ID, "token"):
            driver.get(base + "/login")
        driver.find_element(By.ID, "token").send_keys(token)
        driver.find_element(By.CSS_SELECTOR, "form[action='/login'] button").click()
        WebDriverWait(driver, 20).until(lambda d: not d.find_elements(By.ID, "token"))
        print("SIGNED-IN", flush=True)
        driver.get(url)
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.ID, "approve"))
    print("PROMPT " + driver.find_element(By.ID, "prompt").text, flush=True)
    driver.find_element(By.ID, "approve-comment").send_keys("approved from the task's link")
    driver.find_element(By.CSS_SELECTOR, "#approve button").click()
    WebDriverWait(driver, 20).until(
        lambda d: not d.find_elements(By.ID, "approve") and "approved" in d.page_source
    )
    print("DONE", flush=True)
finally:
    driver.quit()
