//! The dashboard in a real browser (issue 12): Debian's headless Chromium,
//! driven through chromedriver by fantoccini, against the real `hale serve`
//! in front of `hale chaos`. A named agent is served, then its provider fails
//! until hale pauses it: the page, never reloaded, shows it paused; a click
//! on resume makes it active and the `agent.resumed` event appears in the
//! live stream; a click on a turn opens its timeline. A screenshot is saved
//! at `target/dashboard.png`.
//!
//! Needs `chromium` and `chromedriver` (Debian packages `chromium` and
//! `chromium-driver`, installed by `scripts/test.sh`); without them the test
//! is skipped, except under `CI=true`, where that is a failure.

mod common;

use common::{Proc, free_port, start_chaos, start_serve, workspace_root};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A chromedriver child, killed when dropped.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn browser_present() -> bool {
    let present =
        std::path::Path::new(CHROMIUM).exists() && std::path::Path::new(CHROMEDRIVER).exists();
    if !present {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "chromium/chromedriver are not installed; scripts/test.sh must install them under CI"
        );
        eprintln!(
            "skipped: {CHROMIUM} or {CHROMEDRIVER} missing (apt-get install chromium chromium-driver)"
        );
    }
    present
}

async fn browser(port: u16) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": CHROMIUM,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1400,1100"],
        }),
    );
    let url = format!("http://127.0.0.1:{port}");
    let t0 = Instant::now();
    loop {
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        match ClientBuilder::new(connector)
            .capabilities(caps.clone())
            .connect(&url)
            .await
        {
            Ok(c) => return c,
            Err(e) if t0.elapsed() < Duration::from_secs(30) => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("no browser session from chromedriver at {url}: {e}"),
        }
    }
}

/// Waits until `css` matches an element, or panics naming what was awaited.
async fn wait_for(c: &Client, css: &str, what: &str, limit: Duration) -> Duration {
    let t0 = Instant::now();
    loop {
        if c.find(Locator::Css(css)).await.is_ok() {
            return t0.elapsed();
        }
        if t0.elapsed() > limit {
            let source = c.source().await.unwrap_or_default();
            panic!(
                "{what}: `{css}` not on the page after {limit:?}; page:\n{}",
                &source[..source.len().min(4000)]
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn chat(http: &reqwest::Client, base: &str, n: usize) -> u16 {
    http.post(format!("{base}/v1/chat/completions"))
        .header("x-hale-agent", "bot")
        .json(&json!({"model": "m1",
                      "messages": [{"role": "user", "content": format!("question {n}")}]}))
        .send()
        .await
        .expect("chat")
        .status()
        .as_u16()
}

/// A running `hale chaos` and `hale serve` (agent `bot` named, paused after
/// two failed turns, no automatic trial within the test), with `extra` config
/// and environment.
struct Stack {
    _dir: tempfile::TempDir,
    _chaos: Proc,
    _hale: Proc,
    chaos_base: String,
    base: String,
    http: reqwest::Client,
}

async fn stack(extra: &str, envs: &[(&str, &str)]) -> Stack {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().expect("tempdir");
    let http = hale_testkit::client(Duration::from_secs(30));

    let (chaos, chaos_base) = start_chaos(&http, dir.path()).await;
    let config = format!(
        "providers:
  - {{name: p1, kind: openai, base_url: {chaos_base}/v1, default_model: m1}}
agents:
  default: {{provider: p1}}
  bot: {{provider: p1}}
self_healing:
  max_consecutive_failures: 2
  resume_probe_after_ms: 600000
retry:
  server_error: {{max_attempts: 1, initial_ms: 10, max_ms: 10}}
{extra}"
    );
    let (hale, base) = start_serve(&http, dir.path(), &config, envs).await;
    Stack {
        _dir: dir,
        _chaos: chaos,
        _hale: hale,
        chaos_base,
        base,
        http,
    }
}

async fn start_browser() -> (Driver, Client) {
    let dport = free_port();
    let driver = Driver(
        Command::new(CHROMEDRIVER)
            .arg(format!("--port={dport}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts"),
    );
    (driver, browser(dport).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_shows_a_pause_live_resumes_on_click_and_opens_a_timeline() {
    if !browser_present() {
        return;
    }
    let st = stack("", &[]).await;
    let (http, base, chaos_base) = (&st.http, st.base.as_str(), st.chaos_base.as_str());
    assert_eq!(chat(http, base, 0).await, 200, "a first turn is served");

    let (_driver, c) = start_browser().await;
    c.goto(&format!("{base}/")).await.expect("page loads");
    let limit = Duration::from_secs(20);
    wait_for(
        &c,
        r#"tr[data-agent="bot"] [data-state="active"]"#,
        "the agent",
        limit,
    )
    .await;
    wait_for(
        &c,
        r#"tr[data-deployment="p1/m1"]"#,
        "the deployment",
        limit,
    )
    .await;
    // A mark that a reload would wipe.
    c.execute("window.__hale_no_reload = 1;", vec![])
        .await
        .expect("script");

    // The provider fails; two failed turns pause the named agent.
    let r = http
        .post(format!("{chaos_base}/chaos/override"))
        .json(&json!({"model": "m1", "fault": "error-503"}))
        .send()
        .await
        .expect("override");
    assert!(r.status().is_success());
    assert_eq!(chat(http, base, 1).await, 503);
    assert_eq!(chat(http, base, 2).await, 503);
    let paused_at = Instant::now();
    assert_eq!(chat(http, base, 3).await, 423, "hale paused the agent");
    let shown = wait_for(
        &c,
        r#"tr[data-agent="bot"] [data-state="paused"]"#,
        "the pause",
        limit,
    )
    .await;
    eprintln!(
        "the page showed the pause {:?} after the pausing turn returned",
        paused_at.elapsed().min(shown)
    );
    assert_eq!(
        c.execute("return window.__hale_no_reload === 1;", vec![])
            .await
            .expect("script"),
        json!(true),
        "the page was not reloaded"
    );
    wait_for(
        &c,
        r#".events div[data-kind="agent.paused"]"#,
        "the agent.paused event in the stream",
        limit,
    )
    .await;

    // The operator clicks resume.
    let _ = http
        .post(format!("{chaos_base}/chaos/override"))
        .json(&json!({"model": "m1", "fault": null}))
        .send()
        .await;
    c.find(Locator::Css(r#"tr[data-agent="bot"] button.resume"#))
        .await
        .expect("resume button")
        .click()
        .await
        .expect("click resume");
    wait_for(
        &c,
        r#"tr[data-agent="bot"] [data-state="active"]"#,
        "the agent active again",
        limit,
    )
    .await;
    wait_for(
        &c,
        r#".events div[data-kind="agent.resumed"]"#,
        "the agent.resumed event in the stream",
        limit,
    )
    .await;
    let agent: serde_json::Value =
        hale_testkit::get_json(http, &format!("{base}/agents/bot")).await;
    assert_eq!(
        agent["state"], "active",
        "the click resumed the agent in hale"
    );

    // A failed turn's timeline, opened from the stream.
    c.find(Locator::Css(
        r#".events div[data-kind="agent.failed"] a.turn"#,
    ))
    .await
    .expect("a turn link")
    .click()
    .await
    .expect("click turn");
    wait_for(&c, "#turn-attempts td", "the turn's attempts", limit).await;
    let timeline = c
        .find(Locator::Css("#turn"))
        .await
        .expect("turn section")
        .text()
        .await
        .expect("text");
    assert!(
        timeline.contains("p1/m1") && timeline.contains("overloaded"),
        "the timeline shows the attempt's target and class: {timeline}"
    );

    let png = c.screenshot().await.expect("screenshot");
    let out = workspace_root().join("target").join("dashboard.png");
    std::fs::write(&out, png).expect("screenshot written");
    eprintln!("screenshot: {}", out.display());
    c.close().await.expect("browser closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_asks_for_the_admin_token_when_keys_are_configured() {
    if !browser_present() {
        return;
    }
    const TOKEN: &str = "dash-admin-token-0123456789";
    let st = stack(
        "auth:\n  keys:\n    - {name: ops, token_env: HALE_T_DASH, scope: admin}\n",
        &[("HALE_T_DASH", TOKEN)],
    )
    .await;
    let (_driver, c) = start_browser().await;
    c.goto(&format!("{}/", st.base)).await.expect("page loads");
    let limit = Duration::from_secs(20);
    wait_for(&c, "form.login input[name=token]", "the login form", limit).await;
    assert!(
        c.find(Locator::Css("#agents")).await.is_err(),
        "no data before a token"
    );
    // A wrong token: the API refuses it and the form comes back.
    let login = |token: &'static str| {
        let c = c.clone();
        async move {
            let input = c
                .find(Locator::Css("form.login input[name=token]"))
                .await
                .expect("token field");
            input.clear().await.expect("clear");
            input.send_keys(token).await.expect("type");
            c.find(Locator::Css("form.login button[type=submit]"))
                .await
                .expect("submit")
                .click()
                .await
                .expect("click");
        }
    };
    login("not-the-token").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    wait_for(
        &c,
        "form.login",
        "the login form after a wrong token",
        limit,
    )
    .await;
    login(TOKEN).await;
    wait_for(&c, "#agents", "the agents view with the admin token", limit).await;
    wait_for(
        &c,
        "#events .ok",
        "the live event stream with the token",
        limit,
    )
    .await;
    let stored = c
        .execute("return sessionStorage.getItem('hale.token');", vec![])
        .await
        .expect("script");
    assert_eq!(stored, json!(TOKEN), "kept in session storage");
    c.close().await.expect("browser closed");
}

/// Issue 13: the dashboard reads the agents a page at a time (the store
/// holds every agent ever seen), paused agents first whatever the page.
/// 105 agents besides the two configured: the first page shows 100 by id
/// and the paused agent from past its end; "next" shows the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_pages_through_many_agents_with_the_paused_first() {
    if !browser_present() {
        return;
    }
    let st = stack("", &[]).await;
    let (http, base) = (&st.http, st.base.as_str());
    for k in 0..105 {
        let status = http
            .post(format!("{base}/v1/chat/completions"))
            .header("x-hale-agent", format!("zz-{k:03}"))
            .json(&json!({"model": "m1", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .expect("chat")
            .status();
        assert_eq!(status, 200, "agent zz-{k:03}");
    }
    let status = http
        .post(format!("{base}/agents/zz-104/pause"))
        .send()
        .await
        .expect("pause")
        .status();
    assert_eq!(status, 200);

    let (_driver, c) = start_browser().await;
    c.goto(&format!("{base}/")).await.expect("page loads");
    let limit = Duration::from_secs(20);
    // Page 1: bot, default, zz-000 … zz-097, and the paused zz-104 first.
    wait_for(
        &c,
        r#"tr[data-agent="zz-097"]"#,
        "the first page's last agent",
        limit,
    )
    .await;
    wait_for(
        &c,
        r#"tr[data-agent="zz-104"] [data-state="paused"]"#,
        "the paused agent from a later page",
        limit,
    )
    .await;
    assert!(
        c.find(Locator::Css(r#"tr[data-agent="zz-098"]"#))
            .await
            .is_err(),
        "zz-098 is on the next page"
    );
    c.find(Locator::Css("button.next-page"))
        .await
        .expect("a next-page button")
        .click()
        .await
        .expect("click next");
    wait_for(&c, r#"tr[data-agent="zz-098"]"#, "the second page", limit).await;
    wait_for(&c, "button.first-page", "a first-page button", limit).await;
    assert!(
        c.find(Locator::Css(r#"tr[data-agent="zz-000"]"#))
            .await
            .is_err(),
        "the first page's agents are gone from the second"
    );
    c.close().await.expect("browser closed");
}
