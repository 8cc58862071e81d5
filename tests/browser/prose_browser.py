"""What the browser scripts beside this one share: a headless Chromium, driven through WebDriver
by the Debian chromedriver, and the steps a person takes on the approval page (sign in with a
token, approve a gate with a comment). Imported by the scripts, never run itself.
"""

from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait


def chromium():
    """A new headless Chromium window, driven by the Debian driver (never one fetched from the
    network)."""
    options = Options()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=options)


def text_of(driver, element_id, timeout=20):
    """The text of the element ELEMENT_ID as it reads now. The page swaps what its stream
    updates (the pending list, a gate's status), so an element found may be gone before its
    text is read: it is found again until a read holds, never for a fixed moment."""

    seen = []

    def read(d):
        try:
            seen.append(d.find_element(By.ID, element_id).text)
            return True
        except (StaleElementReferenceException, NoSuchElementException):
            return False

    WebDriverWait(driver, timeout, poll_frequency=0.05).until(read)
    return seen[-1]


def enter_token(driver, token):
    """On the sign-in page: types TOKEN and sends the form (the caller waits for what follows)."""
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "form[action='/login'] button").click()


def sign_in(driver, base, token):
    """Opens BASE's sign-in page and signs in with TOKEN; waits for the pending list."""
    driver.get(base + "/login")
    enter_token(driver, token)
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.ID, "live"))


def approve_shown(driver, comment):
    """On a gate's page: waits for its approve form, prints PROMPT <the prompt as the page shows
    it>, approves with COMMENT, waits for the page to show the gate approved, and prints DONE."""
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.ID, "approve"))
    print("PROMPT " + text_of(driver, "prompt"), flush=True)
    driver.find_element(By.ID, "approve-comment").send_keys(comment)
    driver.find_element(By.CSS_SELECTOR, "#approve button").click()
    WebDriverWait(driver, 20).until(
        lambda d: not d.find_elements(By.ID, "approve") and "approved" in d.page_source
    )
    print("DONE", flush=True)
