//! The browser harness: Debian's headless Chromium, driven over WebDriver (fantoccini) through a
//! chromedriver this harness starts for each test, so tests stay independent and parallel-safe.
//!
//! ```ignore
//! Browser::start().await.run(async |b| {
//!     b.goto(&app.url("/login")).await;
//!     b.fill("#email", "ann@example.org").await;
//!     b.click_button("Sign in").await;
//!     b.wait_for(Until::Css(".user-email"), WAIT).await;
//! }).await;
//! ```
//!
//! `run` saves a screenshot to `target/browser-screenshots/<test>.png` when the test panics, then
//! closes the browser either way.

use std::{
    io::{BufRead, BufReader},
    os::unix::process::CommandExt,
    panic::AssertUnwindSafe,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use fantoccini::{Client, ClientBuilder, Locator, elements::Element};
use futures_util::FutureExt;
use serde_json::{Value, json};

/// The browser the tests drive: Debian's `chromium` (its launcher script, as a person runs it).
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// How long a step may take before the test fails: generous, for a 2-core machine under load.
pub const WAIT: Duration = Duration::from_secs(15);
/// Signed in: the top bar names the account.
pub const SIGNED_IN: Until<'static> = Until::Css("header.topbar .user-email");

const INSTALL_HINT: &str = "run scripts/test, which installs Debian's chromium and chromium-driver \
     (or: apt-get install -y chromium chromium-driver)";

/// What [`Browser::wait_for`] waits for.
#[derive(Debug, Clone, Copy)]
pub enum Until<'a> {
    /// An element matching this CSS selector is on the page.
    Css(&'a str),
    /// The page's visible text contains this.
    Text(&'a str),
    /// The address bar's path is exactly this (e.g. after a redirect).
    Path(&'a str),
}

/// A chromedriver child in a process group of its own, with a scratch directory holding
/// Chromium's profile and temporary files. Dropping it kills the whole group: killing
/// chromedriver alone leaves Chromium running.
struct Driver {
    child: Child,
    /// The child has been waited for, so its pid (the group id) may already be reused.
    reaped: bool,
    dir: PathBuf,
}

impl Drop for Driver {
    fn drop(&mut self) {
        if !self.reaped {
            // The group id is chromedriver's pid, reserved until it is reaped just below.
            unsafe { libc::kill(-(self.child.id() as libc::pid_t), libc::SIGKILL) };
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn chromedriver_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .map(|d| d.join("chromedriver"))
        .find(|p| p.is_file())
}

/// "ChromeDriver was started successfully on port 41234." → 41234.
fn port_in(line: &str) -> Option<u16> {
    let rest = line.split("started successfully on port ").nth(1)?;
    rest.trim_end().trim_end_matches('.').parse().ok()
}

impl Driver {
    /// Start chromedriver on a port the system picks (`--port=0`, read back from its output), so
    /// parallel tests never race for one. With port 0 chromedriver binds one address family on a
    /// port the system chose and then asks the other for the same port, which another process may
    /// hold ("IPv4 port not available. Exiting..."): such a start is tried again.
    async fn start() -> (Driver, u16) {
        let mut tries = 0;
        loop {
            match Self::start_once().await {
                Ok(started) => return started,
                Err(output) if tries < 5 && output.iter().any(|l| l.contains("port not available")) => tries += 1,
                Err(output) => panic!("chromedriver exited before listening: {output:?}; {INSTALL_HINT}"),
            }
        }
    }

    /// One start: the driver and its port, or what it printed before it exited.
    async fn start_once() -> Result<(Driver, u16), Vec<String>> {
        // Missing browser is a failure, never a skip: a green run must mean the flows were seen.
        assert!(Path::new(CHROMIUM).is_file(), "the browser tests need {CHROMIUM}, which is missing: {INSTALL_HINT}");
        let driver = chromedriver_path()
            .unwrap_or_else(|| panic!("the browser tests need chromedriver, which is not on PATH: {INSTALL_HINT}"));
        let dir = std::env::temp_dir().join(format!("mc-browser-{}", member_console::config::random_hex(6)));
        std::fs::create_dir_all(dir.join("tmp")).expect("a scratch directory for Chromium");
        let child = Command::new(&driver)
            .arg("--port=0")
            // Chromium's shared-memory files (--disable-dev-shm-usage) land here, removed with it.
            .env("TMPDIR", dir.join("tmp"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("could not start {}: {e}; {INSTALL_HINT}", driver.display()));
        let mut d = Driver { child, reaped: false, dir };

        // A thread drains chromedriver's stdout for its whole life (a full pipe would stall it)
        // and hands the lines over until the port shows up.
        let stdout = d.child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let started = Instant::now();
        let mut output = Vec::new();
        loop {
            while let Ok(line) = rx.try_recv() {
                if let Some(port) = port_in(&line) {
                    return Ok((d, port));
                }
                output.push(line);
            }
            if let Ok(Some(status)) = d.child.try_wait() {
                d.reaped = true;
                // Its last lines may still be in the channel.
                std::thread::sleep(Duration::from_millis(50));
                output.extend(rx.try_iter());
                output.push(format!("(exited: {status})"));
                return Err(output);
            }
            assert!(started.elapsed() < WAIT, "chromedriver did not start listening within {WAIT:?}: {output:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// chromedriver's own command for the browser's console log (`goog:loggingPrefs`), which
/// fantoccini has no call for: the entries since the last read.
#[derive(Debug)]
struct BrowserLog;

impl fantoccini::wd::WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(&self, base_url: &url::Url, session_id: Option<&str>) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!("session/{}/se/log", session_id.unwrap_or_default()))
    }

    fn method_and_body(&self, _request_url: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(r#"{"type": "browser"}"#.to_string()))
    }
}

/// One headless Chromium session of one test.
pub struct Browser {
    // Declared first so it drops before `_driver` kills the processes it talks to.
    client: Client,
    /// Held for its drop, which kills chromedriver and Chromium.
    _driver: Driver,
    /// The test's name, for the screenshot's file name.
    name: String,
}

impl Browser {
    /// Start chromedriver and a fresh Chromium session (a new profile: no cookies, no cache).
    pub async fn start() -> Browser {
        // `#[tokio::test]` runs on the test's own thread, which the test harness names after it.
        let name = std::thread::current().name().unwrap_or("browser").replace("::", "__");
        let (driver, port) = Driver::start().await;
        let profile = driver.dir.join("profile");
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--no-first-run",
                    "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.display()),
                ],
            },
            // A hung page fails the test instead of hanging it.
            "timeouts": { "pageLoad": 30_000, "script": 15_000, "implicit": 0 },
            // The page's console, for `page_problems`.
            "goog:loggingPrefs": { "browser": "ALL" },
        });
        let Value::Object(caps) = caps else { unreachable!() };
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .unwrap_or_else(|e| panic!("chromedriver could not start {CHROMIUM}: {e}; {INSTALL_HINT}"));
        Browser { client, _driver: driver, name }
    }

    /// Run a test's steps; if they panic, save a screenshot first. Closes the browser either way.
    pub async fn run(self, steps: impl AsyncFnOnce(&Browser)) {
        let outcome = AssertUnwindSafe(steps(&self)).catch_unwind().await;
        if outcome.is_err() {
            match self.save_screenshot().await {
                Ok(path) => eprintln!("screenshot of the failed test: {}", path.display()),
                Err(e) => eprintln!("no screenshot of the failed test: {e}"),
            }
        }
        self.close().await;
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    }

    /// End the session (Chromium quits), then chromedriver's process group (on drop).
    pub async fn close(self) {
        if let Err(e) = self.client.clone().close().await {
            eprintln!("closing the browser session: {e}");
        }
    }

    /// Screenshot the page to `target/browser-screenshots/<test>.png`.
    pub async fn save_screenshot(&self) -> Result<PathBuf, String> {
        self.screenshot_named(&format!("{}.png", self.name)).await
    }

    /// A journey's step kept as an artifact: `target/browser-screenshots/<test>/<nn>-<step>.png`.
    pub async fn keep_step(&self, n: u32, step: &str) -> PathBuf {
        let name = format!("{}/{n:02}-{step}.png", self.name);
        self.screenshot_named(&name).await.unwrap_or_else(|e| panic!("the screenshot of {step}: {e}"))
    }

    async fn screenshot_named(&self, name: &str) -> Result<PathBuf, String> {
        let png = self.client.screenshot().await.map_err(|e| e.to_string())?;
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/browser-screenshots").join(name);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        }
        std::fs::write(&path, png).map_err(|e| e.to_string())?;
        Ok(path)
    }

    /// Open `url` and wait for it to load (redirects followed, as a browser does).
    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap_or_else(|e| panic!("could not open {url}: {e}"));
    }

    /// The path in the address bar.
    pub async fn path(&self) -> String {
        self.client.current_url().await.expect("the current URL").path().to_string()
    }

    /// The first element matching `css`, waiting up to [`WAIT`] for it to appear.
    pub async fn find(&self, css: &str) -> Element {
        self.wait_for(Until::Css(css), WAIT).await
    }

    /// Every element matching `css` right now (none is an empty list, not a wait).
    pub async fn find_all(&self, css: &str) -> Vec<Element> {
        self.client.find_all(Locator::Css(css)).await.unwrap_or_else(|e| panic!("finding `{css}`: {e}"))
    }

    /// Type the credentials into the sign-in form on the page and press its button, as a person
    /// does.
    pub async fn submit_sign_in(&self, email: &str, password: &str) {
        assert_eq!(self.text_of("main h1").await, "Sign in");
        self.fill("#email", email).await;
        self.fill("#password", password).await;
        self.click_button("Sign in").await;
    }

    /// Open `url` signed out (the sign-in form shows), sign in there, and wait until `then`.
    pub async fn sign_in_at(&self, url: &str, email: &str, password: &str, then: Until<'_>) {
        self.goto(url).await;
        self.submit_sign_in(email, password).await;
        self.wait_for(then, WAIT).await;
    }
    /// Type `text` into the field matching `css`, replacing what it held.
    pub async fn fill(&self, css: &str, text: &str) {
        let field = self.find(css).await;
        field.clear().await.unwrap_or_else(|e| panic!("clearing `{css}`: {e}"));
        field.send_keys(text).await.unwrap_or_else(|e| panic!("typing into `{css}`: {e}"));
    }

    /// Click the element matching `css`.
    pub async fn click(&self, css: &str) {
        self.find(css).await.click().await.unwrap_or_else(|e| panic!("clicking `{css}`: {e}"));
    }

    /// Click the button whose visible label is `label`, as a person picks it.
    pub async fn click_button(&self, label: &str) {
        assert!(!label.contains('\''), "labels with quotes are not supported: {label}");
        let xpath = format!("//button[normalize-space(.)='{label}']");
        let found = self.wait_until(WAIT, async || self.client.find(Locator::XPath(&xpath)).await.ok()).await;
        let Some(button) = found else { panic!("{}", self.report(&format!("no button labelled {label:?}")).await) };
        button.click().await.unwrap_or_else(|e| panic!("clicking the {label:?} button: {e}"));
    }

    /// The visible text of the first element matching `css` (waiting for it to appear).
    pub async fn text_of(&self, css: &str) -> String {
        self.find(css).await.text().await.unwrap_or_else(|e| panic!("reading the text of `{css}`: {e}"))
    }

    /// The visible text of every element matching `css` right now.
    pub async fn texts_of(&self, css: &str) -> Vec<String> {
        let mut texts = Vec::new();
        for e in self.find_all(css).await {
            texts.push(e.text().await.unwrap_or_else(|e| panic!("reading the text of `{css}`: {e}")));
        }
        texts
    }

    /// The text content of every element matching `css` right now, white space folded: for
    /// what WebDriver does not count as visible text, such as an SVG's labels.
    pub async fn text_contents_of(&self, css: &str) -> Vec<String> {
        let texts = self
            .execute(
                "return [...document.querySelectorAll(arguments[0])].map(e => e.textContent.replace(/\\s+/g, ' ').trim());",
                vec![json!(css)],
            )
            .await;
        serde_json::from_value(texts).unwrap_or_else(|e| panic!("the text contents of `{css}`: {e}"))
    }

    /// The current value of the form field matching `css` (what is typed in it now).
    pub async fn value_of(&self, css: &str) -> String {
        let field = self.find(css).await;
        field.prop("value").await.unwrap_or_else(|e| panic!("reading the value of `{css}`: {e}")).unwrap_or_default()
    }

    /// Run `script` in the page (WebDriver "execute script": a returned promise is awaited).
    pub async fn execute(&self, script: &str, args: Vec<Value>) -> Value {
        self.client.execute(script, args).await.unwrap_or_else(|e| panic!("running a script in the page: {e}"))
    }

    /// Forget the current site's cookies, as a stranger's browser would not have them.
    pub async fn forget_cookies(&self) {
        self.client.delete_all_cookies().await.unwrap_or_else(|e| panic!("deleting the cookies: {e}"));
    }

    /// What went wrong loading the current page, as a person with the developer tools open would
    /// see it: every resource (and the page itself) that answered 400 or more, and every error
    /// the page's console printed since the last call.
    pub async fn page_problems(&self) -> Vec<String> {
        let failed = self
            .execute(
                "return [...performance.getEntriesByType('navigation'), ...performance.getEntriesByType('resource')]
                   .filter(e => e.responseStatus >= 400).map(e => e.responseStatus + ' ' + e.name);",
                vec![],
            )
            .await;
        let mut problems: Vec<String> = serde_json::from_value(failed).unwrap_or_default();
        let log = self.client.issue_cmd(BrowserLog).await.unwrap_or_else(|e| panic!("reading the browser's log: {e}"));
        for entry in log.as_array().into_iter().flatten() {
            if entry["level"] == "SEVERE" {
                problems.push(format!("console: {}", entry["message"].as_str().unwrap_or_default()));
            }
        }
        problems
    }

    /// What axe-core finds against WCAG 2.1 A and AA on the page as it is now: one entry per
    /// rule broken, "id (impact): summary", then each element's selector and what to fix. axe is
    /// read from `AXE_CORE_JS` (scripts/test installs it with scripts/install-axe and exports it),
    /// else from where scripts/install-axe puts it; missing, the test fails saying so.
    pub async fn wcag_violations(&self) -> Vec<String> {
        static AXE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        let axe = AXE.get_or_init(|| {
            let path = std::env::var_os("AXE_CORE_JS").map(PathBuf::from).unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/axe/node_modules/axe-core/axe.min.js")
            });
            std::fs::read_to_string(&path).unwrap_or_else(|e| {
                panic!(
                    "the accessibility check needs axe-core at {} ({e}): run scripts/test, which installs it, \
                     or scripts/install-axe (AXE_CORE_JS names another copy)",
                    path.display()
                )
            })
        });
        // axe's bundle sets `window.axe` when run as a script body.
        self.execute(&format!("{axe}\n;return typeof window.axe;"), vec![]).await;
        let found = self
            .execute(
                "return axe.run(document, {
                   runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']},
                   resultTypes: ['violations'],
                 }).then(r => r.violations.map(v =>
                   `${v.id} (${v.impact}): ${v.help}` + v.nodes.map(n =>
                     `\n    ${n.target.join(' ')}: ${(n.failureSummary || '').replace(/\\s+/g, ' ')}`).join('')));",
                vec![],
            )
            .await;
        serde_json::from_value(found).unwrap_or_else(|e| panic!("axe's answer: {e}"))
    }

    /// Wait until `until` holds, up to `timeout`; returns the element for [`Until::Css`] (and the
    /// body otherwise). Fails naming the address and what the page shows.
    pub async fn wait_for(&self, until: Until<'_>, timeout: Duration) -> Element {
        let found = self
            .wait_until(timeout, async || {
                // Errors mid-navigation (the old page going away) mean "not yet".
                match until {
                    Until::Css(css) => self.client.find(Locator::Css(css)).await.ok(),
                    Until::Text(text) => {
                        let body = self.client.find(Locator::Css("body")).await.ok()?;
                        body.text().await.ok()?.contains(text).then_some(body)
                    }
                    Until::Path(path) => {
                        let url = self.client.current_url().await.ok()?;
                        if url.path() != path {
                            return None;
                        }
                        self.client.find(Locator::Css("body")).await.ok()
                    }
                }
            })
            .await;
        match found {
            Some(element) => element,
            None => panic!("{}", self.report(&format!("waited {timeout:?} for {until:?}")).await),
        }
    }

    /// Poll `probe` every 50 ms until it yields something or `timeout` passes.
    async fn wait_until<T>(&self, timeout: Duration, mut probe: impl AsyncFnMut() -> Option<T>) -> Option<T> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = probe().await {
                return Some(v);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `what` went wrong, with the address and the page's visible text: what a person saw.
    async fn report(&self, what: &str) -> String {
        let url = self.client.current_url().await.map(|u| u.to_string()).unwrap_or_else(|e| format!("({e})"));
        let text = match self.client.find(Locator::Css("body")).await {
            Ok(body) => body.text().await.unwrap_or_default(),
            Err(e) => format!("({e})"),
        };
        let text: String = text.chars().take(2000).collect();
        format!("{what}; the page at {url} shows:\n{text}")
    }
}
