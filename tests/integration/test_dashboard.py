"""The web dashboard in a real headless browser: Debian's ``chromium`` driven through
``chromium-driver`` by Selenium, against a real `ferromq serve` with an admin listener
(a token) and a WebSocket listener, and real paho clients.

What a user would notice: the page asks for the token, then shows the node ready
with its listeners; a client that connects is found with the clients table's search
(and another is not) and is kicked from it; a message published from the form
reaches a paho subscriber with its topic, payload and QoS, and is retained (a late
subscriber gets it with the retain flag); the retained browser lists it, reads it and
clears it; the WebSocket panel connects to the broker's ws listener with the page's
own MQTT client, shows a message a paho client publishes and publishes one paho
receives. The browser's console holds no error, and a screenshot of the dashboard is
kept (``test-artifacts/`` at the repository root, or ``$FERROMQ_TEST_ARTIFACTS``).

Chromium and its driver missing is a failure naming the packages, never a skip.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from email.message import Message
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.conftest import RunningBroker, Starter
from tests.support.admin_client import TOKEN, admin_config, api, disconnects, token_config
from tests.support.paho_clients import paho_client, stop, subscribe
from tests.support.services import free_port
from tests.support.waiting import wait_for

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WAIT = 15.0
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ARTIFACTS = Path(
    os.environ.get("FERROMQ_TEST_ARTIFACTS") or Path(__file__).parents[2] / "test-artifacts"
)


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.exists()]
    if missing:
        pytest.fail(
            f"{' and '.join(missing)} not installed: apt-get install chromium chromium-driver "
            "(scripts/test.sh installs them)",
            pytrace=False,
        )
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument("--window-size=1400,2600")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    yield driver
    driver.quit()


class Dashboard:
    """The page of one broker's admin listener, opened with its token."""

    def __init__(self, driver: WebDriver, admin_port: int) -> None:
        self.driver = driver
        self.admin_port = admin_port

    def open(self) -> None:
        self.driver.get(f"http://127.0.0.1:{self.admin_port}/")
        self.find("token-input").send_keys(TOKEN)  # asked for before anything is shown
        assert not self.driver.find_element(By.ID, "main").is_displayed()
        self.find("token-submit").click()
        self.until(lambda: self.text("health-status") == "ready", "the node shows ready")

    def find(self, element_id: str) -> WebElement:
        return WebDriverWait(self.driver, WAIT).until(
            expected_conditions.visibility_of_element_located((By.ID, element_id)),
            f"#{element_id} is not shown",
        )

    def text(self, element_id: str) -> str:
        text: str = self.driver.find_element(By.ID, element_id).text
        return text

    def until(self, condition: Callable[[], bool], what: str) -> None:
        WebDriverWait(self.driver, WAIT).until(lambda _driver: condition(), f"not seen: {what}")

    def fill(self, element_id: str, text: str) -> None:
        field = self.find(element_id)
        field.clear()
        field.send_keys(text)

    def rows(self, table_id: str) -> list[list[str]]:
        """The cells' text of each row, read in one go (the page may be replacing them)."""
        rows: list[list[str]] = self.driver.execute_script(
            "return Array.from(document.querySelectorAll(arguments[0]), "
            "row => Array.from(row.cells, cell => cell.innerText))",
            f"#{table_id} tbody tr",
        )
        return rows

    def gauge(self, label: str) -> float | None:
        """The number on the node panel's card named ``label`` (None: no such card)."""
        text: str | None = self.driver.execute_script(
            "const card = Array.from(document.querySelectorAll('#gauges .card'))"
            ".find(card => card.querySelector('span').textContent === arguments[0]);"
            "return card ? card.querySelector('strong').textContent : null;",
            label,
        )
        return None if text is None else float(text.replace(",", ""))

    def click_and_confirm(self, selector: str) -> None:
        """Click the button at ``selector`` and accept the confirmation it asks for. The
        page may replace the button's row as it is clicked (a list refreshed), and then
        no confirmation comes: the button is found and clicked again."""
        deadline = time.monotonic() + WAIT
        while True:
            with contextlib.suppress(StaleElementReferenceException):
                self.driver.find_element(By.CSS_SELECTOR, selector).click()
            try:
                WebDriverWait(self.driver, 2).until(expected_conditions.alert_is_present())
            except TimeoutException:
                assert time.monotonic() < deadline, f"no confirmation after clicking {selector}"
                continue
            self.driver.switch_to.alert.accept()
            return

    def console_errors(self) -> list[str]:
        return [
            entry["message"]
            for entry in self.driver.get_log("browser")  # type: ignore[attr-defined]  # Chrome's, not in the stubs
            if entry["level"] == "SEVERE"
        ]


def start_dashboard(
    started: Starter, loop: str, driver: WebDriver
) -> tuple[RunningBroker, Dashboard, int]:
    """A broker with a TCP listener, a WebSocket listener and the admin listener (with
    ``TOKEN``), its dashboard opened; and the WebSocket listener's port."""
    admin_port, ws_port = free_port(), free_port()
    listeners = (
        '[[listeners]]\nname = "default"\n'
        f'[[listeners]]\nname = "websocket"\nprotocol = "ws"\nport = {ws_port}\n'
        '[storage]\nbackend = "memory"\n'
    )
    broker = started(loop, token_config(admin_port, listeners))
    dashboard = Dashboard(driver, admin_port)
    dashboard.open()
    return broker, dashboard, ws_port


def screenshot(driver: WebDriver, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    assert driver.save_screenshot(str(path)), f"no screenshot written to {path}"
    return path


def test_health_and_a_connected_client_found_and_kicked(
    started: Starter, loop: str, browser: WebDriver
) -> None:
    broker, page, _ws_port = start_dashboard(started, loop, browser)
    page.until(
        lambda: "listener websocket: open" in page.text("health-detail"), "the listeners' state"
    )
    assert not browser.find_element(By.ID, "cluster").is_displayed()  # not clustered
    sensor, _ = paho_client(broker, "sensor-dash-1", 5)
    other, _ = paho_client(broker, "other-client", 4)
    page.fill("clients-client_id_contains", "dash-1")
    page.until(
        lambda: [row[0] for row in page.rows("clients-table")] == ["sensor-dash-1"],
        "the connected client listed",
    )
    page.until(lambda: page.gauge("clients connected") == 2, "the clients counted")
    for n in range(20):
        other.publish("dash/rate", b"%d" % n, qos=1).wait_for_publish(WAIT)
    page.until(lambda: (page.gauge("messages in/s") or 0) > 0, "a rate of messages in")
    shot = screenshot(browser, f"dashboard-{loop}.png")
    assert shot.read_bytes().startswith(PNG_SIGNATURE)

    reasons = disconnects(sensor)
    page.click_and_confirm("#clients-table button.danger")
    assert reasons.get(timeout=WAIT) == "Administrative action"
    sensor.loop_stop()  # no reconnection
    # Its session (expiry 0) ends with the connection, as the table shows once refreshed.
    wait_for(lambda: api(page.admin_port, "GET", "/clients/sensor-dash-1")[0] == 404, "kicked")
    page.find("clients-refresh").click()
    page.until(
        lambda: page.rows("clients-table") == [],
        "the kicked client gone from the table",
    )
    assert page.console_errors() == []
    for client in (sensor, other):
        stop(client)


def test_a_message_published_from_the_form_reaches_a_subscriber_and_is_retained(
    started: Starter, loop: str, browser: WebDriver
) -> None:
    broker, page, _ws_port = start_dashboard(started, loop, browser)
    listener, inbox = paho_client(broker, "form-listener", 4)
    subscribe(listener, "dash/#", 2)
    page.fill("publish-topic", "dash/light")
    page.fill("publish-payload", "lights on")
    Select(page.find("publish-qos")).select_by_value("2")
    page.find("publish-retain").click()
    page.find("publish-submit").click()
    message = inbox.get(timeout=WAIT)
    assert (message.topic, message.payload, message.qos) == ("dash/light", b"lights on", 2)
    page.until(
        lambda: "delivered to 1 subscriber" in page.text("publish-result"), "the form's answer"
    )
    late, late_inbox = paho_client(broker, "form-late", 4)
    subscribe(late, "dash/light", 1)
    kept = late_inbox.get(timeout=WAIT)
    assert (kept.payload, kept.retain) == (b"lights on", True)

    page.fill("retained-filter", "dash/#")
    page.find("retained-list").click()
    page.until(
        lambda: (
            [row[:3] for row in page.rows("retained-table")] == [["dash/light", "lights on", "2"]]
        ),
        "the retained message listed",
    )
    browser.find_element(
        By.CSS_SELECTOR, '#retained-table tr[data-topic="dash/light"] button'
    ).click()
    page.until(lambda: page.text("retained-payload") == "lights on", "the retained message read")
    page.click_and_confirm("#retained-table button.danger")
    page.until(lambda: page.rows("retained-table") == [], "the cleared message gone")
    assert api(page.admin_port, "GET", "/retained/dash/light")[0] == 404
    assert page.console_errors() == []
    for client in (listener, late):
        stop(client)


def test_the_websocket_panel_talks_mqtt_with_paho(
    started: Starter, loop: str, browser: WebDriver
) -> None:
    broker, page, ws_port = start_dashboard(started, loop, browser)
    assert page.find("ws-url").get_attribute("value") == f"ws://127.0.0.1:{ws_port}/mqtt"
    page.fill("ws-client-id", "browser-panel")
    page.find("ws-connect").click()
    page.until(lambda: page.text("ws-status") == "connected as browser-panel", "connected")
    page.fill("ws-sub-filter", "ws/#")
    Select(page.find("ws-sub-qos")).select_by_value("1")
    page.find("ws-subscribe").click()
    page.until(lambda: page.text("ws-status") == "subscribed to ws/#", "the SUBACK")
    status, client = api(page.admin_port, "GET", "/clients/browser-panel")
    assert status == 200 and client["protocol"] == 4 and client["subscription_count"] == 1

    paho, inbox = paho_client(broker, "ws-peer", 5)
    paho.publish("ws/hello", b"from paho", qos=1).wait_for_publish(WAIT)
    page.until(
        lambda: (
            [row[1:] for row in page.rows("ws-messages")] == [["ws/hello", "from paho", "1", "no"]]
        ),
        "the message in the panel",
    )
    subscribe(paho, "back/#", 1)
    page.fill("ws-pub-topic", "back/up")
    page.fill("ws-pub-payload", "from the browser")
    Select(page.find("ws-pub-qos")).select_by_value("1")
    page.find("ws-publish").click()
    message = inbox.get(timeout=WAIT)
    assert (message.topic, message.payload, message.qos) == ("back/up", b"from the browser", 1)
    page.until(lambda: page.text("ws-status") == "published to back/up", "the PUBACK")
    assert page.console_errors() == []
    stop(paho)


def test_the_files_are_served_without_the_token_and_the_api_still_needs_it(
    started: Starter, loop: str
) -> None:
    port = free_port()
    started(loop, token_config(port))
    for path, content_type in (
        ("/", "text/html"),
        ("/dashboard/", "text/html"),
        ("/dashboard/app.js", "text/javascript"),
        ("/dashboard/mqtt-ws.js", "text/javascript"),
        ("/dashboard/dashboard.css", "text/css"),
    ):
        status, headers, _body = fetch(port, path)
        assert status == 200 and headers["Content-Type"].startswith(content_type), path
        assert "default-src 'self'" in headers["Content-Security-Policy"]
    status, _headers, body = fetch(port, "/dashboard/settings.json")
    assert status == 200 and json.loads(body) == {"token_required": True}
    assert fetch(port, "/dashboard/nothing.js")[0] == 401  # unknown paths need it too
    assert api(port, "GET", "/stats", token=None)[0] == 401
    open_port = free_port()
    started(loop, admin_config(open_port))
    status, _headers, body = fetch(open_port, "/dashboard/settings.json")
    assert json.loads(body) == {"token_required": False}


def fetch(port: int, path: str) -> tuple[int, Message, bytes]:
    """Status, headers and body of ``GET path`` on the admin listener, with no token."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()
