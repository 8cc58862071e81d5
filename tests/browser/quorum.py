"""Two people approve one gate that needs both, each in a real browser (Chromium through
WebDriver), as they would.

Arguments: BASE_URL GATE_PATH TOKEN_A TOKEN_B. Each signs in with their token in a browser of
their own, opens the gate's page and approves it. After the first approval the page says the
first person's vote is counted and the gate waits for one more (prints PROGRESS <text> and
VOTED <note>); after the second it shows the gate approved. Prints DONE at the end.
"""

import sys

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

base, path, *tokens = sys.argv[1:]


def browser():
    options = Options()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    # The Debian driver, never one fetched from the network.
    return webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=options)


for n, token in enumerate(tokens):
    driver = browser()
    try:
        driver.get(base + "/login")
        driver.find_element(By.ID, "token").send_keys(token)
        driver.find_element(By.CSS_SELECTOR, "form[action='/login'] button").click()
        WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.ID, "live"))
        driver.get(base + path)
        WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.ID, "approve"))
        driver.find_element(By.ID, "approve-comment").send_keys("approved by person %d" % (n + 1))
        driver.find_element(By.CSS_SELECTOR, "#approve button").click()
        if n + 1 < len(tokens):
            # Back on the gate's page: still pending, the vote counted, no form any more.
            WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.ID, "voted"))
            print("PROGRESS " + driver.find_element(By.ID, "progress").text, flush=True)
            print("VOTED " + driver.find_element(By.ID, "voted").text, flush=True)
            assert driver.find_element(By.ID, "status").text == "pending"
        else:
            WebDriverWait(driver, 20).until(
                lambda d: d.find_elements(By.ID, "status")
                and d.find_element(By.ID, "status").text == "approved"
            )
            print("PROGRESS " + driver.find_element(By.ID, "progress").text, flush=True)
    finally:
        driver.quit()
print("DONE", flush=True)
