//! A real headless Chromium for the dashboard tests, driven over WebDriver: Debian's
//! `chromium` and `chromium-driver` (installed by `scripts/test`), a chromedriver of the
//! test's own on a free port, a fresh profile in a temporary directory, both gone when the
//! [`Browser`] is dropped.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Map, Value, json};

/// How long anything in the browser may take (the machine is shared): generous.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A headless Chromium under a chromedriver of its own.
pub struct Browser {
    /// The WebDriver session (taken by [`Browser::close`]).
    client: Option<Client>,
    driver: Child,
    port: u16,
    _profile: tempfile::TempDir,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn program(env: &str, default: &str) -> String {
    std::env::var(env).unwrap_or_else(|_| default.to_owned())
}

impl Browser {
    /// Starts chromedriver and a headless Chromium with a 1280×1000 window.
    pub async fn start() -> Browser {
        // WebDriver is plain HTTP on loopback, but the client's TLS stack wants a provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let port = free_port();
        let mut driver = Command::new(program("CHROMEDRIVER", "/usr/bin/chromedriver"))
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver (Debian's chromium-driver; scripts/test installs it)");
        delayq_testkit::kill_when_process_ends(&[driver.id()], &[]);
        let profile = tempfile::tempdir().expect("profile dir");
        let mut caps = Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": program("CHROMIUM", "/usr/bin/chromium"),
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=1280,1000", "--hide-scrollbars", "--no-first-run",
                    "--disable-crash-reporter", "--disable-breakpad",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            }),
        );
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + PATIENCE;
        let client = loop {
            let attempt = tokio::time::timeout(
                Duration::from_secs(5),
                ClientBuilder::rustls()
                    .expect("rustls")
                    .capabilities(caps.clone())
                    .connect(&url),
            )
            .await;
            let Ok(attempt) = attempt else { continue };
            match attempt {
                Ok(client) => break client,
                Err(e) if Instant::now() < deadline => {
                    if let Ok(Some(status)) = driver.try_wait() {
                        panic!("chromedriver exited: {status}");
                    }
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("no WebDriver session: {e}"),
            }
        };
        Browser {
            client: Some(client),
            driver,
            port,
            _profile: profile,
        }
    }

    /// Opens `url` and waits for its page. Chromium sometimes answers the first navigation of
    /// a fresh session with "target frame detached" (its renderer swapped under the driver);
    /// that navigation did not happen, so it is tried again, a few times.
    pub async fn goto(&self, url: &str) {
        let mut tries = 0;
        loop {
            match self.c().goto(url).await {
                Ok(()) => return,
                Err(e) if tries < 3 && format!("{e:?}").contains("frame detached") => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("goto {url}: {e}"),
            }
        }
    }

    /// The text of the first element matching the CSS selector, waiting for it.
    pub async fn text(&self, css: &str) -> String {
        self.find(css).await.text().await.expect("text")
    }

    /// The first element matching the CSS selector, waiting for it.
    pub async fn find(&self, css: &str) -> fantoccini::elements::Element {
        tokio::time::timeout(PATIENCE, self.c().wait().for_element(Locator::Css(css)))
            .await
            .unwrap_or_else(|_| panic!("no element {css} in time"))
            .unwrap_or_else(|e| panic!("no element {css}: {e}"))
    }

    /// Every element matching the CSS selector now.
    pub async fn all(&self, css: &str) -> Vec<fantoccini::elements::Element> {
        self.c()
            .find_all(Locator::Css(css))
            .await
            .expect("find_all")
    }

    /// Whether an element matches the CSS selector now.
    pub async fn has(&self, css: &str) -> bool {
        !self.all(css).await.is_empty()
    }

    /// Clicks the first element matching the CSS selector.
    pub async fn click(&self, css: &str) {
        self.find(css).await.click().await.expect("click");
    }

    /// Types into the first element matching the CSS selector.
    pub async fn fill(&self, css: &str, text: &str) {
        let el = self.find(css).await;
        el.clear().await.expect("clear");
        el.send_keys(text).await.expect("send_keys");
    }

    /// Runs JavaScript in the page and returns its value.
    pub async fn js(&self, script: &str) -> Value {
        self.c().execute(script, vec![]).await.expect("execute")
    }

    /// The page's URL.
    pub async fn url(&self) -> String {
        self.c().current_url().await.expect("url").to_string()
    }

    /// Waits (bounded by [`PATIENCE`]) until `check` holds on the page.
    pub async fn until(&self, what: &str, mut check: impl AsyncFnMut(&Browser) -> bool) {
        let deadline = Instant::now() + PATIENCE;
        while !check(self).await {
            assert!(Instant::now() < deadline, "timed out waiting: {what}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Saves a PNG of the window as `target/dashboard-screenshots/<name>.png` (under
    /// `CARGO_TARGET_DIR` when set) and returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.c().screenshot().await.expect("screenshot");
        let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
            || PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target")),
            PathBuf::from,
        );
        let dir = target.join("dashboard-screenshots");
        std::fs::create_dir_all(&dir).expect("screenshot dir");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write screenshot");
        path
    }

    /// The WebDriver session.
    pub fn c(&self) -> &Client {
        self.client.as_ref().expect("the session is open")
    }

    /// Ends the session (Chromium exits); dropping then ends chromedriver. (fantoccini ends
    /// a session only through its last handle, hence the `Option`.)
    pub async fn close(mut self) {
        if let Some(client) = self.client.take() {
            let _ = tokio::time::timeout(PATIENCE, client.close()).await;
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromedriver's own `/shutdown` ends its sessions' Chromium too (a test that failed
        // before close() leaves one open); then chromedriver itself, by its pid only.
        if let Ok(mut conn) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
            use std::io::{Read, Write};
            let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = conn.write_all(
                b"GET /shutdown HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
            );
            let _ = conn.read(&mut [0u8; 512]);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && matches!(self.driver.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
