//! Real headless Chromium for the console's browser tests, driven over the W3C
//! WebDriver protocol (Debian's `chromium` and `chromium-driver`).
//!
//! Why a client of our own: the protocol needed here is a dozen JSON-over-HTTP calls
//! (new session, navigate, find by CSS, text, attribute, click, send keys, screenshot,
//! delete session), which `reqwest` and `serde_json` already in the workspace speak;
//! a WebDriver crate would add a dependency tree for the same calls.
//!
//! Each [`Browser`] starts its own `chromedriver --port=0` (the port is read back from
//! its banner, so parallel tests never share one) in a process group of its own, and
//! kills that group when dropped: chromedriver and the Chromium it started go with the
//! test, even one that panicked before [`Browser::close`].
//!
//! A browser check must never pass without a browser: [`Browser::start`] answers
//! `None` (the caller prints a notice and skips) only when chromium or chromedriver is
//! missing and `ACCEL_REQUIRE_BROWSER` is not `1`; with it set (scripts/test.sh) a
//! missing browser fails the test.
//!
//! Finding elements waits (the session's implicit wait, [`WAIT`]), so a test asks for
//! what a page shows and gets it when it is there, without sleeping.

use anyhow::{anyhow, bail, Context};
use base64::Engine as _;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long a find waits for its element to appear (the WebDriver implicit wait),
/// and how long [`Browser::wait_for`] waits for a condition.
pub const WAIT: Duration = Duration::from_secs(10);

/// The environment variable that turns a missing browser into a failure.
pub const REQUIRE: &str = "ACCEL_REQUIRE_BROWSER";

/// The browser and its driver, as Debian installs them.
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// The W3C key code of Enter (for [`Element::send_keys`]).
pub const ENTER: &str = "\u{E007}";

/// The W3C name of an element reference in JSON.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A WebDriver session on headless Chromium, with the chromedriver that serves it.
pub struct Browser {
    http: reqwest::Client,
    /// `http://127.0.0.1:PORT/session/ID`.
    session: String,
    driver: Child,
    /// Set once the driver's group was killed (a pid is not killed twice).
    killed: bool,
}

/// An element a find returned.
#[derive(Clone, Debug)]
pub struct Element {
    id: String,
}

/// Where the browser and its driver are, or why the test cannot have them.
fn programs() -> Result<(String, String), String> {
    let chromium = std::env::var("ACCEL_CHROMIUM").unwrap_or_else(|_| CHROMIUM.into());
    let driver = std::env::var("ACCEL_CHROMEDRIVER").unwrap_or_else(|_| CHROMEDRIVER.into());
    for p in [&chromium, &driver] {
        if !Path::new(p).exists() {
            return Err(format!(
                "{p} not found (install Debian's chromium and chromium-driver)"
            ));
        }
    }
    Ok((chromium, driver))
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session (1400×900). `None` when
    /// the browser is not installed and `ACCEL_REQUIRE_BROWSER` is not `1`: the caller
    /// must then print that it skipped (see the module doc); panics when it is `1`.
    pub async fn start() -> Option<Browser> {
        let required = std::env::var(REQUIRE).is_ok_and(|v| v == "1");
        match programs() {
            Ok((chromium, driver)) => Some(
                Browser::launch(&chromium, &driver)
                    .await
                    .expect("starting headless Chromium"),
            ),
            Err(why) if required => panic!("{REQUIRE}=1 but {why}"),
            Err(why) => {
                println!("SKIPPED browser test: {why}; set {REQUIRE}=1 to make this a failure");
                None
            }
        }
    }

    async fn launch(chromium: &str, driver: &str) -> anyhow::Result<Browser> {
        let mut child = Command::new(driver)
            .arg("--port=0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .with_context(|| format!("spawning {driver}"))?;
        let stdout = child.stdout.take().context("chromedriver's stdout")?;
        // The banner names the port: "ChromeDriver was started successfully on port N."
        let port = tokio::task::spawn_blocking(move || -> anyhow::Result<u16> {
            let mut lines = BufReader::new(stdout).lines();
            for line in lines.by_ref() {
                let line = line?;
                if let Some(rest) = line.split("started successfully on port ").nth(1) {
                    let port = rest.trim_end_matches('.').trim().parse()?;
                    // Keep reading (and dropping) its output so it never blocks on a
                    // full pipe.
                    std::thread::spawn(move || lines.for_each(drop));
                    return Ok(port);
                }
            }
            bail!("chromedriver exited before it said its port")
        })
        .await??;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()?;
        let mut browser = Browser {
            http,
            session: String::new(),
            driver: child,
            killed: false,
        };
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--window-size=1400,900", "--disable-dev-shm-usage"],
            },
            "timeouts": {"implicit": WAIT.as_millis() as u64, "pageLoad": 30_000},
        }}});
        let base = format!("http://127.0.0.1:{port}");
        let v = browser
            .call(
                reqwest::Method::POST,
                &format!("{base}/session"),
                Some(caps),
            )
            .await?;
        let id = v["sessionId"]
            .as_str()
            .ok_or_else(|| anyhow!("no sessionId in {v}"))?;
        browser.session = format!("{base}/session/{id}");
        Ok(browser)
    }

    /// One WebDriver command: its `value`, or the error WebDriver answered.
    async fn call(
        &self,
        method: reqwest::Method,
        url: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let mut r = self.http.request(method.clone(), url);
        if let Some(b) = body {
            r = r.json(&b);
        } else if method == reqwest::Method::POST {
            r = r.json(&json!({}));
        }
        let resp = r.send().await.with_context(|| format!("{method} {url}"))?;
        let status = resp.status();
        let v: Value = resp
            .json()
            .await
            .with_context(|| format!("{method} {url}"))?;
        if !status.is_success() {
            bail!(
                "{method} {url}: {status} {} {}",
                v["value"]["error"],
                v["value"]["message"]
            );
        }
        Ok(v["value"].clone())
    }

    async fn cmd(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}{path}", self.session);
        self.call(method, &url, body)
            .await
            .unwrap_or_else(|e| panic!("WebDriver: {e:#}"))
    }

    /// Navigates to `url` and waits for the page to load.
    pub async fn goto(&self, url: &str) {
        self.cmd(reqwest::Method::POST, "/url", Some(json!({ "url": url })))
            .await;
    }

    /// The URL the browser shows now.
    pub async fn url(&self) -> String {
        let v = self.cmd(reqwest::Method::GET, "/url", None).await;
        v.as_str().unwrap_or_default().to_owned()
    }

    /// The page's title.
    pub async fn title(&self) -> String {
        let v = self.cmd(reqwest::Method::GET, "/title", None).await;
        v.as_str().unwrap_or_default().to_owned()
    }

    /// The page's HTML as the browser holds it now.
    pub async fn source(&self) -> String {
        let v = self.cmd(reqwest::Method::GET, "/source", None).await;
        v.as_str().unwrap_or_default().to_owned()
    }

    /// The first element matching the CSS selector `css`, waiting for it up to
    /// [`WAIT`]; panics (with the page's URL) when none appears.
    pub async fn find(&self, css: &str) -> Element {
        match self.try_find(css).await {
            Some(e) => e,
            None => panic!("no element matches {css:?} on {}", self.url().await),
        }
    }

    /// The first element matching `css`, or `None` after [`WAIT`].
    pub async fn try_find(&self, css: &str) -> Option<Element> {
        let url = format!("{}/element", self.session);
        let body = json!({"using": "css selector", "value": css});
        match self.call(reqwest::Method::POST, &url, Some(body)).await {
            Ok(v) => Some(element(&v)),
            Err(e) if e.to_string().contains("no such element") => None,
            Err(e) => panic!("WebDriver: {e:#}"),
        }
    }

    /// Every element matching `css` now (waits for the first, up to [`WAIT`], and
    /// answers an empty list when none appears).
    pub async fn find_all(&self, css: &str) -> Vec<Element> {
        let body = json!({"using": "css selector", "value": css});
        let v = self
            .cmd(reqwest::Method::POST, "/elements", Some(body))
            .await;
        v.as_array()
            .map(|a| a.iter().map(element).collect())
            .unwrap_or_default()
    }

    /// Every element matching `css` now, without the implicit wait: for "nothing of
    /// this shows" checks, which must not wait for something that should not come.
    pub async fn find_all_now(&self, css: &str) -> Vec<Element> {
        self.set_implicit(Duration::ZERO).await;
        let found = self.find_all(css).await;
        self.set_implicit(WAIT).await;
        found
    }

    async fn set_implicit(&self, d: Duration) {
        let body = json!({"implicit": d.as_millis() as u64});
        self.cmd(reqwest::Method::POST, "/timeouts", Some(body))
            .await;
    }

    /// The visible text of the first element matching `css`.
    pub async fn text_of(&self, css: &str) -> String {
        let e = self.find(css).await;
        self.text(&e).await
    }

    /// An element's visible text (as a person reads it: hidden parts left out).
    pub async fn text(&self, e: &Element) -> String {
        let v = self
            .cmd(
                reqwest::Method::GET,
                &format!("/element/{}/text", e.id),
                None,
            )
            .await;
        v.as_str().unwrap_or_default().to_owned()
    }

    /// An element's attribute, `None` when it has none.
    pub async fn attr(&self, e: &Element, name: &str) -> Option<String> {
        let path = format!("/element/{}/attribute/{name}", e.id);
        let v = self.cmd(reqwest::Method::GET, &path, None).await;
        v.as_str().map(str::to_owned)
    }

    /// The first element matching `css` inside `e`, waiting up to [`WAIT`].
    pub async fn find_in(&self, e: &Element, css: &str) -> Element {
        let body = json!({"using": "css selector", "value": css});
        let path = format!("/element/{}/element", e.id);
        element(&self.cmd(reqwest::Method::POST, &path, Some(body)).await)
    }

    /// Every element matching `css` inside `e`, without waiting.
    pub async fn find_all_in(&self, e: &Element, css: &str) -> Vec<Element> {
        self.set_implicit(Duration::ZERO).await;
        let body = json!({"using": "css selector", "value": css});
        let path = format!("/element/{}/elements", e.id);
        let v = self.cmd(reqwest::Method::POST, &path, Some(body)).await;
        self.set_implicit(WAIT).await;
        v.as_array()
            .map(|a| a.iter().map(element).collect())
            .unwrap_or_default()
    }

    /// Clicks an element (a link navigates, a submit button submits its form).
    pub async fn click(&self, e: &Element) {
        let path = format!("/element/{}/click", e.id);
        self.cmd(reqwest::Method::POST, &path, None).await;
    }

    /// Clicks an element that leaves the page (a link, a submit button) and waits
    /// until the browser has replaced the page: the clicked element goes stale. A
    /// plain [`Browser::click`] returns before the navigation it starts, so the next
    /// command could still see the old page, or be overtaken by the new one.
    pub async fn click_and_wait(&self, e: &Element) {
        self.click(e).await;
        self.wait_replaced(e).await;
    }

    /// Waits until `e`, an element of the page before a navigation, is gone (the
    /// new page replaced it) and the new page has loaded.
    pub async fn wait_replaced(&self, e: &Element) {
        let path = format!("{}/element/{}/name", self.session, e.id);
        crate::eventually(WAIT, "the page to be replaced after a click", || async {
            match self.call(reqwest::Method::GET, &path, None).await {
                // Chromium says "stale element reference", or, while the old page is
                // being torn down, that the node no longer belongs to the document.
                Err(err)
                    if ["stale element reference", "does not belong to the document"]
                        .iter()
                        .any(|m| err.to_string().contains(m)) =>
                {
                    Ok(())
                }
                Err(err) => panic!("WebDriver: {err:#}"),
                Ok(_) => Err("the clicked element is still on the page".to_owned()),
            }
        })
        .await;
        // The new page has loaded when its readyState says so.
        crate::eventually(WAIT, "the new page to load", || async {
            let v = self.execute("return document.readyState", &[]).await;
            (v == "complete")
                .then_some(())
                .ok_or(format!("readyState {v}"))
        })
        .await;
    }

    /// Runs `script` in the page (WebDriver's execute, which the page's
    /// Content-Security-Policy does not govern) with `elements` as `arguments`;
    /// answers what it returns.
    pub async fn execute(&self, script: &str, elements: &[&Element]) -> Value {
        let args: Vec<Value> = elements
            .iter()
            .map(|e| json!({ ELEMENT_KEY: e.id }))
            .collect();
        let body = json!({"script": script, "args": args});
        self.cmd(reqwest::Method::POST, "/execute/sync", Some(body))
            .await
    }

    /// Scrolls the page so that `e` is at the top of the viewport (for a screenshot
    /// of what lies below the fold).
    pub async fn scroll_to(&self, e: &Element) {
        self.execute("arguments[0].scrollIntoView({block: 'start'})", &[e])
            .await;
    }

    /// Empties a text field.
    pub async fn clear(&self, e: &Element) {
        let path = format!("/element/{}/clear", e.id);
        self.cmd(reqwest::Method::POST, &path, None).await;
    }

    /// Types `text` into an element ([`ENTER`] submits a form's field).
    pub async fn send_keys(&self, e: &Element, text: &str) {
        let path = format!("/element/{}/value", e.id);
        self.cmd(reqwest::Method::POST, &path, Some(json!({ "text": text })))
            .await;
    }

    /// Replaces the value of the field matching `css` with `text`.
    pub async fn fill(&self, css: &str, text: &str) {
        let e = self.find(css).await;
        self.clear(&e).await;
        self.send_keys(&e, text).await;
    }

    /// Submits the form the field `e` belongs to, as a person pressing Enter in it
    /// does, and waits for the answer's page (as [`Browser::click_and_wait`]).
    pub async fn submit(&self, e: &Element) {
        self.send_keys(e, ENTER).await;
        self.wait_replaced(e).await;
    }

    /// A cookie of the page's site, as the browser stores it (name, value,
    /// `httpOnly`, `sameSite`, ...); `None` when there is none.
    pub async fn cookie(&self, name: &str) -> Option<Value> {
        let path = format!("/cookie/{name}");
        let url = format!("{}{path}", self.session);
        match self.call(reqwest::Method::GET, &url, None).await {
            Ok(v) => Some(v),
            Err(e) if e.to_string().contains("no such cookie") => None,
            Err(e) => panic!("WebDriver: {e:#}"),
        }
    }

    /// Forgets every cookie of the page's site (a logged-out browser).
    pub async fn delete_cookies(&self) {
        self.cmd(reqwest::Method::DELETE, "/cookie", None).await;
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&self) -> Vec<u8> {
        let v = self.cmd(reqwest::Method::GET, "/screenshot", None).await;
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("a base64 screenshot"))
            .expect("a base64 screenshot")
    }

    /// Saves a PNG of the viewport to `path` (its folder is created).
    pub async fn save_screenshot(&self, path: &Path) {
        let png = self.screenshot().await;
        assert!(png.starts_with(b"\x89PNG"), "the screenshot is not a PNG");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(path, png).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }

    /// Waits (up to [`WAIT`]) until the text of the first element matching `css`
    /// satisfies `ok`, and returns it; panics with the last text otherwise. For pages
    /// that refresh themselves.
    pub async fn wait_for(&self, css: &str, ok: impl Fn(&str) -> bool) -> String {
        crate::eventually(WAIT, &format!("the text of {css}"), || async {
            let t = self.text_of(css).await;
            if ok(&t) {
                Ok(t)
            } else {
                Err(format!("last text: {t:?}"))
            }
        })
        .await
    }

    /// Ends the session (Chromium exits) and stops chromedriver.
    pub async fn close(mut self) {
        let url = self.session.clone();
        let _ = self.call(reqwest::Method::DELETE, &url, None).await;
        self.kill();
    }

    fn kill(&mut self) {
        if std::mem::replace(&mut self.killed, true) {
            return;
        }
        // The driver leads its own process group (`process_group(0)`): killing the
        // group takes Chromium's processes with it.
        let group = format!("-{}", self.driver.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.kill();
    }
}

fn element(v: &Value) -> Element {
    Element {
        id: v[ELEMENT_KEY]
            .as_str()
            .unwrap_or_else(|| panic!("not an element: {v}"))
            .to_owned(),
    }
}
