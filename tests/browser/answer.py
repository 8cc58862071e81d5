"""A person answers a gate's response schema and edits its input on the approval page, in a
real browser (Chromium through WebDriver), by keyboard.

Arguments: BASE_URL TOKEN GATE_PATH. Signs in, opens the gate, fills the form the schema made
(a text, a select, a checkbox, lines, a nested number), sends a number over its maximum and
prints ERROR <the error beside that field>, corrects it, edits the input `draft`, approves,
prints each line of the preview's diff as DIFF <line>, confirms, and prints ANSWER <the
answer as the gate's page then shows it> and DONE.
"""

import os
import sys

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True
from prose_browser import chromium, sign_in, text_of  # noqa: E402

base, token, gate_path = sys.argv[1:4]
driver = chromium()


def field(name):
    return driver.find_element(By.CSS_SELECTOR, f'[name="{name}"]')


def retype(name, text):
    """Empties the field NAME and types TEXT into it, by keyboard."""
    el = field(name)
    el.send_keys(Keys.CONTROL, "a")
    el.send_keys(Keys.DELETE)
    el.send_keys(text)


try:
    sign_in(driver, base, token)
    driver.get(base + gate_path)
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.ID, "answer"))
    # The default is shown filled in.
    assert field("r/limits/max_minutes").get_attribute("value") == "15"
    retype("r/verdict", "Ship it")
    # The select, by keyboard: the first letter picks the choice.
    field("r/risk").send_keys("h")
    # The checkbox, by keyboard.
    field("r/rollback").send_keys(Keys.SPACE)
    retype("r/reviewers", "ann\nbob")
    retype("r/limits/max_minutes", "90")
    driver.find_element(By.CSS_SELECTOR, "#approve button[type=submit]").click()
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".field-error"))
    # The error is beside its field, and what was typed is kept.
    box = field("r/limits/max_minutes")
    error = driver.find_element(By.ID, box.get_attribute("aria-describedby").split()[1])
    print("ERROR " + error.text, flush=True)
    assert field("r/verdict").get_attribute("value") == "Ship it"
    assert field("r/rollback").is_selected()
    retype("r/limits/max_minutes", "30")
    retype("edit/draft", "Release notes\nv2 ships today\n")
    driver.find_element(By.CSS_SELECTOR, "#approve button[type=submit]").click()
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.ID, "confirm"))
    for line in driver.find_element(By.CSS_SELECTOR, "pre.diff").text.split("\n"):
        print("DIFF " + line, flush=True)
    driver.find_element(By.ID, "confirm-approve").click()
    WebDriverWait(driver, 20).until(
        lambda d: d.find_elements(By.ID, "answer-given") and not d.find_elements(By.ID, "approve")
    )
    print("ANSWER " + " ".join(text_of(driver, "answer-given").split()), flush=True)
    print("EDITED " + text_of(driver, "edited"), flush=True)
    print("DONE", flush=True)
finally:
    driver.quit()
