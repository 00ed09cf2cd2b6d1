"""Reading and driving the console's page in Chromium (selenium). The page polls the home every
2 s and draws its rows and graph afresh, so elements are found again when drawn over, and what
a test reads is read in one script."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait


def wait(driver: Any, until: Callable[[Any], Any], timeout: float = 30) -> Any:
    """Wait for the page (it polls the home every 2 s, drawing its rows and graph afresh) to show
    ``until``; an element drawn over meanwhile is looked for again."""
    return WebDriverWait(driver, timeout, poll_frequency=0.2,
                         ignored_exceptions=[StaleElementReferenceException]).until(until)


def click(driver: Any, css: str) -> None:
    """Click the element ``css`` finds, once it is there (found again if drawn over)."""
    wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, css).click() or True)


def shown(driver: Any, css: str) -> dict[str, dict[str, Any]]:
    """The elements ``css`` finds, by their ``data-queue``: their classes and texts (of their
    cells, for rows), read in one script so the page cannot draw in between."""
    found = driver.execute_script("""
        return [...document.querySelectorAll(arguments[0])].map((e) => ({
            queue: e.getAttribute("data-queue"), classes: (e.getAttribute("class") || "").split(" ").filter(Boolean),
            cells: [...e.querySelectorAll(":scope > td")].map((c) => c.innerText), text: e.textContent}));""", css)
    return {e["queue"]: {**e, "classes": set(e["classes"])} for e in found}


def rows(driver: Any) -> dict[str, dict[str, Any]]:
    return shown(driver, "tr.queue")


def classes(element: Any) -> set[str]:
    return set((element.get_attribute("class") or "").split())
